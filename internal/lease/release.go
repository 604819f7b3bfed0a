package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/notify"
)

// Release releases one hold count of h (all of them with all) whatever ctx
// says: the release is sent even when ctx is already done, and finished in
// the background when ctx ends before its reply (bounded by the cleanup
// timeout). It returns the release's outcome: nil, ErrNotHeld when nothing
// was left to release, a *LossError when the lease had been lost; or, once
// ctx is done, an error wrapping ctx's cause while the release goes on.
// Safe for concurrent use.
func (h *Lease) Release(ctx context.Context, all bool) error {
	if h.tryTurn() {
		return h.releaseTurn(ctx, all)
	}
	// Another count-changing call of the lease goes first: wait for the
	// lease's turn on a goroutine of its own.
	out := make(chan error, 1)
	h.e.Detach(func(dctx context.Context) { out <- h.release(dctx, all) })
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
			// ctx is the lease's own context, cancelled by this very
			// release as it completed: its outcome is on its way.
			return <-out
		}
		return &PendingRelease{Name: h.name, Cause: CtxErr(ctx)}
	}
}

// PendingRelease is a release's answer when its ctx ended before the
// release was confirmed, or when a non-final release got no answer (it is
// resent to settle the count: settleLater); the release goes on in the
// background. Cause matches ctx.Err() and ctx's cause with errors.Is
// (CtxErr), or is the error the release got.
type PendingRelease struct {
	Name  string
	Cause error
}

func (e *PendingRelease) Error() string {
	return fmt.Sprintf("dlock: the release of %q goes on in the background: %v", e.Name, e.Cause)
}

func (e *PendingRelease) Unwrap() error { return e.Cause }

// release waits for the lease's turn, then releases.
func (h *Lease) release(ctx context.Context, all bool) error {
	if err := h.turn(ctx); err != nil {
		return doneErr(ctx, err)
	}
	return h.releaseTurn(ctx, all)
}

// release is what the release call in flight needs for its bookkeeping,
// kept in the lease while it holds the turn.
type release struct {
	count    int
	all      bool
	final    bool          // the release ends the lease
	renewing bool          // a final release of a lease that was being renewed
	observe  func(Release) // the release's observers
	pass     bool          // the release is a pass in Redis (Passer) to h.passing
	check    bool          // the release is a pass in memory's check (checkCall)
	checked  *passCheck    // that check, whose answer the next holder awaits
	baton    baton         // what the waiter h.passing gets with the gate
}

// releaseUndo finishes the bookkeeping of a release whose caller left
// before its reply.
type releaseUndo Lease

func (u *releaseUndo) Undo(ctx context.Context, cmd redis.Cmder) { _ = (*Lease)(u).released(ctx, cmd) }

// releaseTurn is release once the caller has the lease's turn, which it
// gives back. The release is sent even when ctx is done; when ctx ends
// before its reply, releaseTurn returns a *PendingRelease and the reply is
// read in the background.
func (h *Lease) releaseTurn(ctx context.Context, all bool) error {
	if c := h.pendingCheck(); !c.wait(ctx) {
		// The hold came by a pass in memory whose check Redis has not
		// answered: a release sent now could remove the field before the
		// check reads it, which would read as a loss (pass.go). The
		// release follows the answer in the background.
		h.e.Detach(func(dctx context.Context) {
			c.wait(dctx)
			_ = h.releaseSend(dctx, all)
		})
		return &PendingRelease{Name: h.name, Cause: CtxErr(ctx)}
	}
	return h.releaseSend(ctx, all)
}

// releaseSend is releaseTurn once no check the release must follow is in
// flight.
func (h *Lease) releaseSend(ctx context.Context, all bool) error {
	e := h.e
	h.mu.Lock()
	count, finished, lost := h.count, h.finished, h.err
	h.mu.Unlock()
	switch {
	case finished && lost != nil:
		h.endTurn()
		return lost // an outer count of a lease already found lost
	case finished || count == 0:
		h.endTurn()
		return ErrNotHeld
	case e.closed.Load() && !all:
		h.endTurn()
		return ErrClosed
	}
	h.rel = release{count: count, all: all, final: count == 1 || all}
	h.quiesce()
	if len(e.Cfg.Observers) > 0 {
		h.rel.observe = ObserveRelease(e.Cfg.Observers, ctx, h.p.Kind(), h.name)
	}
	cl := h.releaseCall(count, all)
	cl.Undo = (*releaseUndo)(h)
	if notify.Tracing && h.rel.final {
		notify.Trace(e.Cfg.ClientID, notify.HopRelease)
	}
	if left, err := e.Wire.Do(ctx, cl); left {
		return &PendingRelease{Name: h.name, Cause: doneErr(ctx, err)}
	}
	err := h.released(ctx, cl.Cmd)
	cl.Free()
	return err
}

// quiesce stops the deadline and renewal of a lease whose final release is
// about to be sent.
func (h *Lease) quiesce() {
	if !h.rel.final {
		return
	}
	h.mu.Lock()
	h.rel.renewing = h.renewing
	quiet := h.err == nil
	if quiet {
		h.certainAtRelease = time.Now().Before(h.validUntil)
	}
	h.mu.Unlock()
	if quiet {
		// The protected work is over while the lease was still certain:
		// the release's own answer decides whether it was lost, not a
		// deadline that passes while the release is on its way.
		h.e.deadlines.remove(h)
	}
	if h.rel.renewing {
		// No renewal sent from now on counts for the lease: a renewal that
		// reaches Redis after the release would find the field gone and
		// report the lease lost.
		h.e.renewer.Cancel(&h.renewal)
	}
}

// released does the bookkeeping of a release call whose reply is in, and
// gives the lease's turn back.
func (h *Lease) released(ctx context.Context, cmd redis.Cmder) error {
	switch {
	case h.rel.check:
		return h.checked(ctx, cmd)
	case !h.rel.pass:
		r, err := h.p.ReleaseReply(cmd)
		return h.conclude(r, err)
	}
	r, top, err := h.p.(Passer).PassReply(cmd)
	switch {
	case top != 0:
		h.rel.baton.takeTokens(top, h.p.(Passer).Spare())
	case err != nil || !r.Found && r.Why == CodeGone:
		// The pass may have been made: unanswered, or resent after its
		// first send made it (which took the releaser's field).
		h.rel.baton.mayHold = true
	}
	return h.conclude(r, err)
}

// conclude applies a release's answer to the lease, gives the handle's
// gate to the waiter a pass went to (passOn), and gives the lease's turn
// back.
func (h *Lease) conclude(r Released, err error) error {
	rel := h.rel
	later := err != nil && !rel.final // a pass or a check is always final
	if !later {
		defer h.endTurn()
	}
	if rel.observe != nil {
		held := time.Since(h.start)
		final := rel.final
		defer func() {
			if errors.Is(err, ErrNotHeld) || err == ErrClosed {
				final, held = false, 0 // nothing was released
			}
			if !final {
				held = 0
			}
			rel.observe(Release{Kind: h.p.Kind(), Name: h.name, Final: final, Held: held, Err: err, Weight: h.weight})
		}()
	}
	if later {
		err = h.settleLater(err)
		return err
	}
	err = h.settle(r, err, rel.final, rel.renewing)
	h.passOn(rel.baton)
	return err
}

// settleLater answers a non-final release that got no answer (err): it may
// have run, so the count it leaves is unknown, and a re-entry sent with the
// count we know would be taken for a resend of an earlier one and not be
// counted (the lock would then end one Unlock early). The same release is
// resent in the background, keeping the lease's turn until its answer
// settles the count (the scripts take a release that finds the count it
// leaves for done); a lease whose count cannot be settled is lost: it is
// renewed no more and its Unlocks answer the loss.
func (h *Lease) settleLater(err error) error {
	count := h.rel.count
	h.e.Detach(func(ctx context.Context) {
		defer h.endTurn()
		r, rerr := h.ReleaseNow(ctx, count, false)
		switch {
		case rerr != nil:
			h.lose(lossError(h.name, ErrReleaseFailed, rerr))
			return
		case !r.Found:
			h.lose(lossError(h.name, GoneReason(r.Why), nil))
			return
		}
		h.mu.Lock()
		h.count = r.Remaining
		h.mu.Unlock()
	})
	return &PendingRelease{Name: h.name, Cause: err}
}

// settle applies a release's answer (or failure) to the lease.
func (h *Lease) settle(r Released, err error, final, renewing bool) error {
	switch {
	case err != nil:
		// Not released, as far as we know: the lock ends by its TTL. The
		// lease is over all the same (a loss, unless it was lost already).
		h.end(lossError(h.name, ErrReleaseFailed, err), nil)
		h.finish()
		return h.Err()
	case !r.Found:
		// The field is gone. Owner fields are never reused, so only our own
		// earlier release (resent by go-redis after a lost reply) removes it
		// while the lease is certain.
		h.mu.Lock()
		// The lease was certain when the release was sent (the work had
		// ended): a field gone since is our own release, resent, or an
		// expiry after the work ended, which overlapped nothing of ours.
		resent := r.Why == CodeGone && h.err == nil && h.certainAtRelease
		h.mu.Unlock()
		if resent {
			h.end(nil, nil)
		} else {
			h.lose(lossError(h.name, GoneReason(r.Why), nil))
		}
		h.finish()
		return h.Err()
	}
	h.mu.Lock()
	h.count = r.Remaining
	lost := h.err
	h.mu.Unlock()
	if r.Remaining == 0 {
		h.end(nil, nil)
		h.finish()
		return lost
	}
	if final && lost == nil {
		// Redis had more holds than we knew (a re-entry whose reply was
		// lost): the lease goes on, so must its deadline and renewal.
		// Unless it ended meanwhile (a forced message's recheck): an
		// ended lease is renewed no more.
		h.mu.Lock()
		live := !h.ended
		if live {
			h.e.deadlines.add(h, h.deadline())
			h.renewing = renewing
		}
		h.mu.Unlock()
		if live && renewing {
			h.e.renewer.Add(&h.renewal, time.Now())
			h.mu.Lock()
			ended := h.ended
			h.mu.Unlock()
			if ended {
				// end ran between: its Cancel may have come before the Add.
				h.e.renewer.Cancel(&h.renewal)
			}
		}
	}
	// A count of a lost hold answers the loss, whichever count it is: the
	// work it guarded may have overlapped another holder's.
	return lost
}

// ReleaseNow sends one release of count (all of them with all) for h and
// decodes its reply, without the bookkeeping: for undoing a grant nobody
// claimed, and for tests.
func (h *Lease) ReleaseNow(ctx context.Context, count int, all bool) (Released, error) {
	cl := h.p.Release(h, count, all)
	if left, err := h.e.Wire.Do(ctx, cl); left {
		return Released{}, err
	}
	defer cl.Free()
	return h.p.ReleaseReply(cl.Cmd)
}

// releaseAll is Close's release of a lease it has already told of the loss.
func (h *Lease) releaseAll(ctx context.Context) error {
	err := h.release(ctx, true)
	if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
		return nil
	}
	return err
}

// finish frees the handle after the final release, whatever its outcome.
func (h *Lease) finish() {
	h.mu.Lock()
	if h.finished {
		h.mu.Unlock()
		return
	}
	h.finished, h.count = true, 0
	h.mu.Unlock()
	h.handle.vacate(h)
}

// endedByRelease reports whether the lease ended by a release rather than a
// loss.
func (h *Lease) endedByRelease() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended && h.err == nil
}
