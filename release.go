package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// releaseDetached releases one count of h (all of them with all) whatever
// ctx says: the release is sent even when ctx is already done, and finished
// in the background when ctx ends before its reply (bounded by the cleanup
// timeout). It returns the release's outcome, or, once ctx is done, an
// error wrapping ctx's cause while the release goes on.
func (c *Client) releaseDetached(ctx context.Context, h *hold, all bool) error {
	if h.tryTurn() {
		return h.releaseTurn(ctx, all)
	}
	// Another count-changing call of the hold goes first: wait for the
	// hold's turn on a goroutine of its own.
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
func (h *hold) release(ctx context.Context, all bool) error {
	if err := h.turn(ctx); err != nil {
		return err
	}
	return h.releaseTurn(ctx, all)
}

// releaseTurn is release once the caller has the hold's turn, which it
// gives back. The release is sent even when ctx is done; when ctx ends
// before its reply, releaseTurn returns a *pendingRelease and the reply is
// read in the background.
func (h *hold) releaseTurn(ctx context.Context, all bool) error {
	c := h.c
	h.mu.Lock()
	count, finished, lost := h.count, h.finished, h.err
	h.mu.Unlock()
	switch {
	case finished && lost != nil:
		h.endTurn()
		return lost // an outer count of a hold already found lost
	case finished || count == 0:
		h.endTurn()
		return ErrNotHeld
	case c.closed.Load() && !all:
		h.endTurn()
		return ErrClosed
	}
	final := count == 1 || all
	h.mu.Lock()
	renewing := final && h.renewing
	quiesce := final && h.err == nil
	if quiesce {
		h.certainAtRelease = time.Now().Before(h.validUntil)
	}
	h.mu.Unlock()
	if quiesce {
		// The protected work is over while the hold was still certain: the
		// release's own answer decides whether it was lost, not a deadline
		// that passes while the release is on its way.
		c.deadlines.remove(h)
	}
	if renewing {
		// No renewal sent from now on counts for the hold: a renewal that
		// reaches Redis after the release would find the field gone and
		// report the hold lost.
		c.renewer.Cancel(&h.renewal)
	}
	cmd, s := h.p.release(h, count, all)
	cl := newCall(cmd, s)
	cl.op, cl.h, cl.count, cl.all, cl.final, cl.renewing = opRelease, h, count, all, final, renewing
	if len(c.cfg.observers) > 0 {
		cl.observe = c.observeRelease(ctx, h.p.kind(), h.name)
	}
	if left, err := c.batch.do(ctx, cl); left {
		return &pendingRelease{name: h.name, cause: err}
	}
	err := h.released(cl)
	cl.free()
	return err
}

// released does the bookkeeping of a release call whose reply is in, and
// gives the hold's turn back.
func (h *hold) released(cl *call) (err error) {
	defer h.endTurn()
	final, renewing := cl.final, cl.renewing
	if cl.observe != nil {
		held := time.Since(h.start)
		defer func() {
			if errors.Is(err, ErrNotHeld) || err == ErrClosed {
				final, held = false, 0 // nothing was released
			}
			if !final {
				held = 0
			}
			cl.observe(Release{Kind: h.p.kind(), Name: h.name, Final: final, Held: held, Err: err})
		}()
	}
	r, err := h.p.releaseReply(cl.cmd)
	if err == nil && (r.n != 2 || r.v[0] != 0 && r.v[0] != 1) {
		err = fmt.Errorf("dlock: unexpected release reply %v", r)
	}
	return h.settle(r, err, final, renewing)
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
		// The field is gone. Owner fields are never reused, so only our own
		// earlier release (resent by go-redis after a lost reply) removes it
		// while the hold is certain.
		h.mu.Lock()
		// The hold was certain when the release was sent (the work had
		// ended): a field gone since is our own release, resent, or an
		// expiry after the work ended, which overlapped nothing of ours.
		resent := r.v[1] == goneCode && h.err == nil && h.certainAtRelease
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
		h.c.deadlines.add(h, h.deadline())
		h.renewing = renewing
		h.mu.Unlock()
		if renewing {
			h.c.renewer.Add(&h.renewal, time.Now())
		}
	}
	return nil
}

// releaseNow sends one release of count (all of them with all) for h and
// reads its reply, without the bookkeeping: for undoing a grant nobody
// claimed, and for tests.
func (h *hold) releaseNow(ctx context.Context, count int, all bool) (reply, error) {
	cmd, s := h.p.release(h, count, all)
	cl := newCall(cmd, s)
	if left, err := h.c.batch.do(ctx, cl); left {
		return reply{}, err
	}
	defer cl.free()
	return h.p.releaseReply(cmd)
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
