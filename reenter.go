package dlock

import (
	"context"
	"fmt"
	"time"
)

// reenter counts one more hold of h, which ctx carries.
func (h *hold) reenter(ctx context.Context, lease time.Duration) error {
	if err := h.lostErr(); err != nil {
		// The hold was declared lost here, though Redis may still have it:
		// re-entering would extend a hold that nothing renews.
		return err
	}
	if err := h.turn(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	count := h.count
	h.mu.Unlock()
	if count == 0 {
		h.endTurn()
		return fmt.Errorf("%w: the context's hold of %q has been released", ErrNotHeld, h.name)
	}
	ttl := lease
	if lease <= 0 {
		ttl = h.c.cfg.watchdog
	}
	cmd, s := h.p.attempt(h, ttl, count, queueing{})
	cl := newCall(cmd, s)
	cl.op, cl.h, cl.count = opReenter, h, count
	if left, err := h.c.batch.do(ctx, cl); left {
		return err // the handler gives the turn back
	}
	defer h.endTurn()
	r, err := h.p.attemptReply(cmd, count)
	cl.free()
	if err != nil {
		return err
	}
	if r.n == 3 && r.v[0] == 1 {
		h.mu.Lock()
		h.count = int(r.v[1])
		h.mu.Unlock()
		return nil
	}
	h.lose(lossError(h.name, ErrTakenOver, nil))
	return h.lostErr()
}
