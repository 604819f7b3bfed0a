package lease

import (
	"context"
	"fmt"
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
//     the TTL and its certainty, the renewal) with the next spare token,
//     once Redis says the field is still there (one HEXISTS: the releaser's
//     Unlock reports a loss, data lost or forced, as a release's reply would
//     have). Tokens stay strictly increasing: every spare token was taken
//     from the counter while the hold was this process's, so any later
//     holder elsewhere gets a larger one.
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
		h.rel.check, h.rel.baton = true, b
		return h.checkCall()
	}
	h.rel.pass, h.rel.baton = true, baton{sent: time.Now()}
	return pp.Pass(h, w.next, w.ttl)
}

// spareBaton is the baton of a pass in memory to w, when h can make one:
// a watchdog lease to a watchdog waiter, not lost, certain for a third of
// its TTL at least (else a pass in Redis confirms it), with a spare token.
func (h *Lease) spareBaton(w *gateWaiter) (baton, bool) {
	ttl := h.e.Cfg.Watchdog
	h.mu.Lock()
	defer h.mu.Unlock()
	next, top := h.spare[0], h.spare[1]
	if h.lease > 0 || w.lease > 0 || w.ttl != ttl || h.err != nil || next == 0 || next > top || time.Until(h.validUntil) < ttl/3 {
		return baton{}, false
	}
	return baton{token: next, field: h.field, validUntil: h.validUntil, spare: [2]uint64{next + 1, top}}, true
}

// checkCall is the call a pass in memory sends before it hands the hold
// on: HEXISTS of the hold's field, so that the releaser learns of a loss
// (data lost, forced) as a release's reply would have told it, and the
// next holder takes a hold Redis still had after the releaser's work.
func (h *Lease) checkCall() *wire.Call {
	return wire.NewCall(redis.NewIntCmd(context.Background(), "hexists", h.p.Key(), h.field), nil)
}

// checked reads checkCall's reply: a field found is a release (the baton
// goes to the waiter); a missing one is a loss, whose reason a renewal
// asks Redis for, and the waiter gets the gate alone.
func (h *Lease) checked(ctx context.Context, cmd redis.Cmder) error {
	n, err := cmd.(*redis.IntCmd).Result()
	switch {
	case err != nil:
		h.rel.baton = baton{}
		return h.conclude(Released{}, err)
	case n == 1:
		return h.conclude(Released{Found: true}, nil)
	case n != 0:
		h.rel.baton = baton{}
		return h.conclude(Released{}, fmt.Errorf("dlock: unexpected HEXISTS reply %d", n))
	}
	h.rel.baton = baton{}
	code, _, err := h.renewOnce(ctx, h.e.Cfg.Watchdog)
	if err != nil || code == renew.Held {
		code = CodeGone // gone a moment ago: whatever holds it now is not us
	}
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
// lease from now on.
func (a *acquisition) adopt(ctx context.Context, b baton) (bool, error) {
	h := a.h
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
