package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// releaseDetached releases one count of h (all of them with all) on a
// goroutine of its own, bounded by the cleanup timeout, so that the release is
// sent even when ctx is already done. It returns the release's outcome, or,
// once ctx is done, an error wrapping ctx's cause while the release goes on.
func (c *Client) releaseDetached(ctx context.Context, h *hold, all bool) error {
	if ctx.Done() == nil {
		return h.release(ctx, all)
	}
	out := make(chan error, 1)
	c.detach(func(dctx context.Context) { out <- h.release(dctx, all) })
	select {
	case err := <-out:
		return err
	case <-ctx.Done():
		select {
		case err := <-out:
			return err
		default:
		}
		if h.endedByRelease() {
			// ctx is the hold's own context, cancelled by this very
			// release as it completed: its outcome is on its way.
			return <-out
		}
		return &pendingRelease{name: h.name, cause: context.Cause(ctx)}
	}
}

// pendingRelease is Unlock's answer when its ctx ended before the release
// was confirmed; the release goes on in the background.
type pendingRelease struct {
	name  string
	cause error
}

func (e *pendingRelease) Error() string {
	return fmt.Sprintf("dlock: the release of %q goes on in the background: %v", e.name, e.cause)
}

func (e *pendingRelease) Unwrap() error { return e.cause }

// release undoes one hold count (all of them with all) and, at zero, ends
// the hold and frees the handle. On any error from the final release the
// hold is finished all the same: the lock expires by its TTL at the latest.
func (h *hold) release(ctx context.Context, all bool) (err error) {
	c := h.c
	if err := h.serialize(ctx); err != nil {
		return err
	}
	defer h.unserialize()
	h.mu.Lock()
	count, finished, lost := h.count, h.finished, h.err
	h.mu.Unlock()
	if finished && lost != nil {
		return lost // an outer count of a hold already found lost
	}
	if finished || count == 0 {
		return ErrNotHeld
	}
	if c.closed.Load() && !all {
		return ErrClosed
	}
	final := count == 1 || all
	if len(c.cfg.observers) > 0 {
		finish := c.observeRelease(ctx, h.p.kind(), h.name)
		held := time.Since(h.start)
		defer func() {
			if errors.Is(err, ErrNotHeld) || err == ErrClosed {
				final, held = false, 0 // nothing was released
			}
			if !final {
				held = 0
			}
			finish(Release{Kind: h.p.kind(), Name: h.name, Final: final, Held: held, Err: err})
		}()
	}
	renewing := h.quiesce(final)
	r, err := readReply(h.p.release(ctx, h, count, all))
	if err == nil && (r.n != 2 || r.v[0] != 0 && r.v[0] != 1) {
		err = fmt.Errorf("dlock: unexpected release reply %v", r.v[:r.n])
	}
	return h.settle(r, err, final, renewing)
}

// quiesce readies the hold for its final release and reports whether it was
// being renewed: no renewal may race the release, and the protected work is
// over while the hold was still certain, so the release's own answer decides
// whether it was lost, not a deadline that passes while it is on its way.
func (h *hold) quiesce(final bool) (renewing bool) {
	if !final {
		return false
	}
	h.mu.Lock()
	renewing = h.renewing
	if h.err == nil && h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	if renewing {
		h.c.renewer.Remove(&h.renewal)
	}
	return renewing
}

// settle applies a release's answer (or failure) to the hold.
func (h *hold) settle(r reply, err error, final, renewing bool) error {
	switch {
	case err != nil && !final:
		return err
	case err != nil:
		// Not released, as far as we know: the lock ends by its TTL. The
		// hold is over all the same (a loss, unless it was lost already).
		h.end(lossError(h.name, ErrUnconfirmed, err), nil)
		h.finish()
		return h.lostErr()
	case r.v[0] == 0:
		// The field is gone. Owner fields are never reused, so while the
		// hold was still certain, only our own earlier release (resent by
		// go-redis after a lost reply) can have removed it.
		h.mu.Lock()
		resent := r.v[1] == goneCode && h.err == nil && time.Now().Before(h.validUntil)
		h.mu.Unlock()
		if resent {
			h.end(nil, nil)
		} else {
			h.lose(lossError(h.name, goneReason(r.v[1]), nil))
		}
		h.finish()
		return h.lostErr()
	}
	remaining := int(r.v[1])
	h.mu.Lock()
	h.count = remaining
	lost := h.err
	h.mu.Unlock()
	if remaining == 0 {
		h.end(nil, nil)
		h.finish()
		return lost
	}
	if final && lost == nil {
		// Redis had more holds than we knew (a re-entry whose reply was
		// lost): the hold goes on, so must its deadline and renewal.
		h.mu.Lock()
		h.timer.Reset(time.Until(h.validUntil))
		h.renewing = renewing
		h.mu.Unlock()
		if renewing {
			h.c.renewer.Add(&h.renewal, time.Now())
		}
	}
	return nil
}

// releaseAll is Close's release of a hold it has already told of the loss.
func (h *hold) releaseAll(ctx context.Context) error {
	err := h.release(ctx, true)
	if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
		return nil
	}
	return err
}

// finish frees the handle after the final release, whatever its outcome.
func (h *hold) finish() {
	h.mu.Lock()
	if h.finished {
		h.mu.Unlock()
		return
	}
	h.finished, h.count = true, 0
	h.mu.Unlock()
	h.handle.vacate(h)
}

// endedByRelease reports whether the hold ended by a release rather than a
// loss.
func (h *hold) endedByRelease() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended && h.err == nil
}
