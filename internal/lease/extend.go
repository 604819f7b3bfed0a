package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/renew"
)

// Extend gives a lease with a fixed lease d from now: in Redis, through the
// kind's renewal, which never shortens a TTL (a call that lands late, its
// caller gone or the wire resending it, must not cut short the lease a
// later call gave), and in the holder's local deadline, which moves to d
// from the call, earlier than Redis's end when d is less than what was
// left. A lease renewed by the watchdog, and d below a millisecond, give
// ErrInvalidArgument; a lease that ended gives ErrNotHeld, or its loss. It
// returns ctx's cause once ctx is done, and the call's error when it got no
// answer; the local deadline then stays where it was (the call can only
// lengthen what Redis has). Safe for concurrent use: it takes the lease's
// turn like a release.
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
