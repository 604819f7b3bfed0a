package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/renew"
)

// Extend gives a lease with a fixed lease d from now: in Redis (through
// the kind's renewal, which never shortens what other owners share: a
// read-write lock's TTL) and in the holder's local deadline, which moves
// with it. A lease renewed by the watchdog, and d below a millisecond, give
// ErrInvalidArgument; a lease that ended gives ErrNotHeld, or its loss. It
// returns ctx's cause once ctx is done, and the call's error when it got no
// answer; the local deadline then moves to d from the call if that is
// earlier (the call may still run and shorten the TTL), and stays where it
// was otherwise. Safe for concurrent use: it takes the lease's turn like a
// release.
func (h *Lease) Extend(ctx context.Context, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("%w: lease %v must be at least 1ms", ErrInvalidArgument, d)
	}
	if err := h.turn(ctx); err != nil {
		return doneErr(ctx, err)
	}
	defer h.endTurn()
	h.mu.Lock()
	ended, lost, fixed := h.ended || h.finished, h.err, h.lease > 0
	h.mu.Unlock()
	switch {
	case lost != nil:
		return lost
	case ended:
		return ErrNotHeld
	case !fixed:
		return fmt.Errorf("%w: %q is renewed by the watchdog; only a fixed lease can be extended", ErrInvalidArgument, h.name)
	}
	code, sent, err := h.renewOnce(ctx, d)
	switch {
	case err != nil:
		// The call may still run in Redis (a reply lost, or ctx ended while
		// the wire still sends it), and d may be shorter than what is left:
		// the holder is told by the earlier of the two ends.
		h.mu.Lock()
		if v := sent.Add(d - DriftMargin(d)); !h.ended && v.Before(h.validUntil) {
			h.e.deadlines.remove(h)
			h.validUntil = v
			h.e.deadlines.add(h, h.deadline())
		}
		h.mu.Unlock()
		return doneErr(ctx, err)
	case code != renew.Held:
		h.lose(lossError(h.name, GoneReason(code), nil))
		return h.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return h.err // lost while the call was on its way
	}
	h.e.deadlines.remove(h)
	h.lease, h.until = d, sent.Add(d)
	h.validUntil = h.until.Add(-DriftMargin(d))
	h.e.deadlines.add(h, h.deadline())
	return nil
}
