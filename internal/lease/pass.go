package lease

import (
	"context"
	"time"

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
//     the TTL and its certainty, the renewal) with the next spare token, and
//     nothing is sent. Tokens stay strictly increasing: every spare token
//     was taken from the counter while the hold was this process's, so any
//     later holder elsewhere gets a larger one.
//
// The kind bounds the passes in a row (Passer.MayPass), after which the
// release goes through Redis' queue as any other.

// releaseCall builds the release of count holds (all of them with all): a
// pass when the kind makes them and another goroutine waits at the gate,
// nil for a pass in memory (nothing to send; h.rel.baton is ready).
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
		h.rel.baton = b
		return nil
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
	if h.lease > 0 || w.ttl != ttl || h.err != nil || next == 0 || next > top || time.Until(h.validUntil) < ttl/3 {
		return baton{}, false
	}
	return baton{token: next, field: h.field, validUntil: h.validUntil, spare: [2]uint64{next + 1, top}}, true
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
	a.granted = true
	h.field, h.spare = b.field, b.spare
	if !h.adopted(b.token, b.validUntil) {
		// Close has begun and already released what it knew of.
		h.end(lossError(h.name, ErrClosed, nil), nil)
		_ = h.Release(ctx, true)
		return false, ErrClosed
	}
	h.handle.occupy(h)
	return true, nil
}
