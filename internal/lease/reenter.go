package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// reenter counts one more hold of h, which ctx carries. It never moves the
// hold's end in Redis: the scripts ignore a re-entry's TTL, so a re-entry
// asking for another lease (or for the watchdog) leaves the holder and
// Redis agreeing on when the hold ends. A maxHold > 0 bounds the hold, here,
// while this re-entry is counted (innerMax): the holder is told when it
// passes, as for the lease's own MaxHold.
func (h *Lease) reenter(ctx context.Context, lease, maxHold time.Duration) error {
	if err := h.Err(); err != nil {
		// The hold was declared lost here, though Redis may still have it:
		// re-entering would extend a hold that nothing renews.
		return err
	}
	if err := h.turn(ctx); err != nil {
		return doneErr(ctx, err)
	}
	h.mu.Lock()
	count, lost := h.count, h.err
	h.mu.Unlock()
	if lost != nil {
		h.endTurn()
		return lost // lost while this call waited for its turn
	}
	if count == 0 {
		h.endTurn()
		return fmt.Errorf("%w: the context's hold of %q has been released", ErrNotHeld, h.name)
	}
	ttl := lease
	if lease <= 0 {
		ttl = h.e.Cfg.Watchdog
	}
	h.rel.count = count
	cl := h.p.Attempt(h, ttl, count, Queueing{})
	cl.Undo = (*reenterUndo)(h)
	if left, err := h.e.Wire.Do(ctx, cl); left {
		return doneErr(ctx, err) // its Undo gives the turn back
	}
	r, err := h.p.AttemptReply(cl.Cmd, count)
	cl.Free()
	if err != nil {
		// The re-entry may have run with its reply lost, and nobody will
		// unlock a count the caller was told it did not get: it is
		// counted back down, as reenterUndo does, before the lease's next
		// count-changing call. The scripts take a release that expects
		// one hold more than Redis has for done, so this is harmless
		// when the re-entry never ran.
		h.e.Detach(func(dctx context.Context) {
			defer h.endTurn()
			_, _ = h.ReleaseNow(dctx, count+1, false)
		})
		return err
	}
	defer h.endTurn()
	if r.Granted {
		h.mu.Lock()
		h.count = r.Count
		h.boundLevel(r.Count, maxHold)
		over := !time.Now().Before(h.deadline())
		h.mu.Unlock()
		if over {
			// The reply came after the hold could no longer be vouched
			// for: Redis counted the re-entry while the hold lasted, which
			// says nothing of now.
			h.checkDeadline()
		}
		return h.Err()
	}
	h.lose(lossError(h.name, ErrTakenOver, nil))
	return h.Err()
}

// reenterUndo counts a re-entry whose caller left back down, if it
// happened, before the lease takes its next count-changing call.
type reenterUndo Lease

func (u *reenterUndo) Undo(ctx context.Context, cmd redis.Cmder) {
	h := (*Lease)(u)
	defer h.endTurn()
	if r, err := h.p.AttemptReply(cmd, h.rel.count); err == nil && r.Granted {
		_, _ = h.ReleaseNow(ctx, h.rel.count+1, false)
	}
}

// boundLevel records the MaxHold of the re-entry that made the count n
// (innerMax), and moves the hold's deadline when that comes first. The
// caller holds h.mu.
func (h *Lease) boundLevel(n int, maxHold time.Duration) {
	if n < 2 || (maxHold <= 0 && len(h.innerMax) < n-1) {
		return // nothing recorded at or above this level to clear
	}
	for len(h.innerMax) < n-1 {
		h.innerMax = append(h.innerMax, time.Time{})
	}
	h.innerMax[n-2] = time.Time{}
	if maxHold > 0 {
		h.innerMax[n-2] = time.Now().Add(maxHold)
		if !h.ended {
			h.e.deadlines.add(h, h.deadline())
		}
	}
}
