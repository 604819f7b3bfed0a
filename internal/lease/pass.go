package lease

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

// Passing a hold between goroutines of one Client (lock cohorting, Dice,
// Marathe and Shavit): when a final Unlock finds another goroutine waiting
// at the handle's gate, the hold goes to it instead of back to Redis.
//
//   - In Redis: one script (Passer.Pass) frees the releaser's field and
//     gives the waiter's its TTL and fencing tokens; the waiter, told in
//     memory, holds from when the script was sent, as from an attempt of
//     its own. A FairMutex's pass asks Redis whether another process queues.
//   - In memory: a holder with spare tokens (taken by the pass in Redis that
//     made it, Passer.Spare) hands its Redis hold on as it is (the field,
//     the TTL and its certainty, the renewal) with the next spare token, at
//     once, and asks Redis whether the field is still there (one HEXISTS,
//     passCheck): the releaser's Unlock reports a loss, data lost or
//     forced, as a release's reply would have, and the next holder, which
//     holds the same Redis hold, is told of it too. Tokens stay strictly
//     increasing: every spare token was taken from the counter while the
//     hold was this process's, so any later holder elsewhere gets a larger
//     one.
//
// The kind bounds the passes in a row (Passer.MayPass), after which the
// release goes through Redis' queue as any other.

// releaseCall builds the release of count holds (all of them with all): a
// pass when the kind makes them and another goroutine waits at the gate,
// in Redis or (checkCall) in memory.
func (h *Lease) releaseCall(count int, all bool) *wire.Call {
	pp, ok := h.p.(Passer)
	if !ok || !h.rel.final || all || count != 1 || h.e.closed.Load() {
		return h.p.Release(h, count, all)
	}
	w, inRow := h.handle.gate.reserve()
	if w == nil {
		return h.p.Release(h, count, all)
	}
	if !pp.MayPass(inRow) {
		h.handle.gate.putBack(w)
		return h.p.Release(h, count, all)
	}
	h.mu.Lock()
	h.passing = w
	h.mu.Unlock()
	if b, ok := h.spareBaton(w); ok {
		b.check = &passCheck{done: make(chan struct{})}
		h.rel.check, h.rel.checked = true, b.check
		h.mu.Lock()
		h.passing, h.handed = nil, true
		h.mu.Unlock()
		// The hold is the next holder's from here on: an Unlock, Extend or
		// HoldCount whose ctx names no hold means its lease alone, not the
		// releaser's, which only waits for the check's answer.
		h.handle.remove(h)
		h.handle.gate.handOver(w, b)
		// The next holder, made runnable on this P, runs now rather than
		// after this goroutine's write of the check and its wait for the
		// reply: the hand-over is then a goroutine switch, not an idle
		// thread's wake-up (W=10 shared gap p50 0.05 against 0.12 ms on a
		// 2-vCPU Intel Xeon family 6 model 167, PING 35 µs: bench/JOURNAL.md).
		runtime.Gosched()
		return h.checkCall()
	}
	h.rel.pass, h.rel.baton = true, baton{sent: time.Now()}
	return pp.Pass(h, w.next, w.ttl)
}

// spareBaton is the baton of a pass in memory to w, when h can make one:
// a watchdog lease to a watchdog waiter, not lost, with a spare token, and
// whose renewal is not due yet: certain for two thirds of its TTL less the
// drift margin, as a hold is just after a renewal. The next holder, which
// takes the hold at once, then has the renewal period a hold of its own
// would have to confirm it; past that, a pass in Redis gives it a new TTL.
// (With the third that sufficed while the next holder waited for the
// check, a renewal overdue at the hand-over raced the deadline over a slow
// link: TestFaultLatencyUnderRenewalPeriod, 270 ms round trips.)
func (h *Lease) spareBaton(w *gateWaiter) (baton, bool) {
	ttl := h.e.Cfg.Watchdog
	h.mu.Lock()
	defer h.mu.Unlock()
	next, top := h.spare[0], h.spare[1]
	if h.lease > 0 || w.lease > 0 || w.ttl != ttl || h.err != nil || next == 0 || next > top || time.Until(h.validUntil) < 2*ttl/3-DriftMargin(ttl) {
		return baton{}, false
	}
	return baton{token: next, field: h.field, validUntil: h.validUntil, spare: [2]uint64{next + 1, top}}, true
}

// passCheck is the check of a pass in memory (checkCall), which the pass
// sends as it hands the hold on: the next holder starts at once, and the
// check's answer reaches it afterwards.
//   - The field is there: the hold lasted until the releaser's Unlock (an
//     owner field is never reused), and nothing changes.
//   - It is gone (data lost, forced): the releaser's Unlock reports the
//     loss, and the next holder's lease, the same Redis hold, is lost too,
//     as a holder is told of any loss during its hold. A next holder that
//     has not begun by then does not take the hold: its gate comes alone.
//   - No answer: the releaser's Unlock reports the failure, and the next
//     holder's renewals find out what Redis has.
//
// The next holder's release, pass or undo in Redis waits for the answer
// (wait), so that it never removes the field before the check reads it: a
// check that found the field its successor had released would read as a
// loss. Safe for concurrent use.
type passCheck struct {
	done chan struct{} // closed with the answer
	mu   sync.Mutex
	gone error  // the loss's reason, when the field was gone
	heir *Lease // the next holder's lease, once it has begun
}

// settle records the check's answer (gone: the loss's reason, nil unless
// the field was gone) and tells the next holder of a loss.
func (c *passCheck) settle(gone error) {
	c.mu.Lock()
	c.gone = gone
	close(c.done)
	heir := c.heir
	c.mu.Unlock()
	if heir != nil && gone != nil {
		heir.lose(lossError(heir.name, gone, nil))
	}
}

// inherit makes h, which has begun holding the passed hold, the one told of
// a loss, and returns the loss's reason if the check has already found one.
func (c *passCheck) inherit(h *Lease) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return c.gone
	default:
		c.heir = h
		return nil
	}
}

// answered reports whether the check's answer is in, and, if so, whether
// the field was gone. A nil check has nothing to wait for.
func (c *passCheck) answered() (done bool, gone error) {
	if c == nil {
		return true, nil
	}
	select {
	case <-c.done:
		return true, c.gone
	default:
		return false, nil
	}
}

// wait waits for the answer until ctx is done, and reports whether it
// came. A nil check has nothing to wait for.
func (c *passCheck) wait(ctx context.Context) bool {
	if c == nil {
		return true
	}
	select {
	case <-c.done:
		return true
	case <-ctx.Done():
		done, _ := c.answered()
		return done
	}
}

// pendingCheck is h's inherited check while its answer is not in: nil
// once it is.
func (h *Lease) pendingCheck() *passCheck {
	if c := h.inherited.Load(); c != nil {
		if done, _ := c.answered(); !done {
			return c
		}
		h.inherited.Store(nil)
	}
	return nil
}

// checkCall is the check a pass in memory sends as it hands the hold on:
// HEXISTS of the hold's field (passCheck), in a script where the client
// would send a bare read to a replica, whose copy may lag the primary's.
func (h *Lease) checkCall() *wire.Call {
	if h.e.Wire.ReadsReplicas() {
		return h.e.Cfg.Read.IntCall(h.argBuf[:0], []any{h.p.Key()}, "hexists", h.field)
	}
	return wire.NewCall(redis.NewIntCmd(context.Background(), "hexists", h.p.Key(), h.field), nil)
}

// checked reads checkCall's reply: a field found is a release; a missing
// one is a loss, whose reason a renewal asks Redis for, of the releaser
// and of the next holder (passCheck).
func (h *Lease) checked(ctx context.Context, cmd redis.Cmder) error {
	c := h.rel.checked
	n, err := cmd.(*redis.IntCmd).Result()
	switch {
	case err != nil:
		c.settle(nil)
		return h.conclude(Released{}, err)
	case n == 1:
		c.settle(nil)
		return h.conclude(Released{Found: true}, nil)
	case n != 0:
		c.settle(nil)
		return h.conclude(Released{}, fmt.Errorf("dlock: unexpected HEXISTS reply %d", n))
	}
	code, _, err := h.renewOnce(ctx, h.e.Cfg.Watchdog)
	if err != nil || code == renew.Held {
		code = CodeGone // gone a moment ago: whatever holds it now is not us
	}
	c.settle(GoneReason(code))
	h.lose(lossError(h.name, GoneReason(code), nil))
	return h.conclude(Released{Found: true}, nil)
}

// takeTokens fills b from a pass in Redis that took the tokens up to top:
// the next holder's, then spare ones for its passes in memory.
func (b *baton) takeTokens(top uint64, spare int) {
	b.token = top - uint64(spare)
	b.spare = [2]uint64{b.token + 1, top}
}

// passOn ends a pass once it is made or failed: the reserved waiter gets
// the gate, with b (the hold, when the pass was made); when the lease goes
// on (Redis had more holds than we knew), the waiter goes back to the head
// of the queue.
func (h *Lease) passOn(b baton) {
	h.mu.Lock()
	w, finished := h.passing, h.finished
	h.passing = nil
	h.mu.Unlock()
	switch {
	case w == nil:
	case finished:
		h.handle.gate.handOver(w, b)
	default:
		h.handle.gate.putBack(w)
	}
}

// adopt makes a hold passed in memory the waiter's lease: the Redis hold
// goes on under its field, certain until the same time, renewed by this
// lease from now on. The pass's check may still be on its way: the lease
// is told if it finds the hold gone, and a hold already found gone is not
// taken (passCheck).
func (a *acquisition) adopt(ctx context.Context, b baton) (bool, error) {
	h := a.h
	if done, gone := b.check.answered(); done && gone != nil {
		// The hold was gone before it was handed on: the gate came alone.
		return a.run(ctx, a.waitCtx)
	}
	ok, err := a.adoptHold(ctx, b)
	if ok && b.check != nil {
		if gone := b.check.inherit(h); gone != nil {
			h.lose(lossError(h.name, gone, nil))
		}
	}
	return ok, err
}

// adoptHold is adopt's hold of the passed hold.
func (a *acquisition) adoptHold(ctx context.Context, b baton) (bool, error) {
	h := a.h
	h.inherited.Store(b.check)
	h.field, h.spare = b.field, b.spare
	if time.Until(b.validUntil) < a.ttl/3 {
		// The check took long (a slow link): too little of the hold's
		// certainty is left to hand on. One renewal confirms it first.
		sent, err := a.confirmFirst(ctx)
		if err != nil {
			return false, err
		}
		return a.hold(ctx, func() bool { return h.granted(b.token, sent, a.lease) })
	}
	return a.hold(ctx, func() bool { return h.adopted(b.token, b.validUntil) })
}
