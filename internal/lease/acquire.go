package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

// Request is one acquisition's wait and lease.
type Request struct {
	Wait, Lease time.Duration
	Forever     bool          // wait as long as ctx allows
	MaxHold     time.Duration // 0: the engine's default; < 0: unbounded
	// Weight is how many units the lease takes (a semaphore's permits);
	// 0 means 1.
	Weight int
}

// Acquire is every acquisition through a handle: a re-entry when ctx
// carries a lease of the name by this engine, else a new lease through the
// handle's gate. It returns the lease and a nil error, nil and a nil error
// when the wait ran out, or nil and an error: never a lease with an error.
// Safe for concurrent use.
func (hd *Handle) Acquire(ctx context.Context, req Request) (h *Lease, err error) {
	if err := hd.Check(ctx, req.Lease); err != nil {
		return nil, err
	}
	hd.e.firstContact()
	start := time.Now()
	a := acquisition{lease: req.Lease, canWait: req.Forever || req.Wait > 0, ttl: req.Lease}
	if finish := ObserveAcquire(hd.e.Cfg.Observers, ctx, hd.p.Kind(), hd.name); finish != nil {
		defer func() {
			finish(Acquisition{Kind: hd.p.Kind(), Name: hd.name, Acquired: h != nil, TimedOut: a.timedOut,
				Err: err, Waited: time.Since(start), Reentry: a.reentry, Backend: BackendRedis, Weight: max(req.Weight, 1)})
		}()
	}
	// Runs before the observer's: what the gate and the wire answer for a
	// done ctx (its cause) becomes an error matching ctx.Err() and the cause.
	defer func() { err = doneErr(ctx, err) }()
	if ctx.Err() != nil {
		return nil, CtxErr(ctx)
	}
	again, under, err := hd.inherited(ctx)
	if err != nil || again != nil {
		a.reentry = again != nil
		if err = orReentered(err, again, ctx, req.Lease, req.MaxHold); err != nil {
			return nil, err // a re-entry that failed is no hold
		}
		return again, nil
	}
	// The wait bounds the whole call, network time included.
	waitCtx := ctx
	if !req.Forever && req.Wait > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithDeadline(ctx, start.Add(req.Wait))
		defer cancel()
	}
	if req.Lease <= 0 {
		a.ttl = hd.e.Cfg.Watchdog
	}
	// A try at a busy gate fails with nothing allocated: the lease is made
	// once the gate is entered (a waiter at the gate needs it before).
	if a.canWait {
		a.h = newLease(hd, under, max(req.Weight, 1))
	}
	b, ok, err := hd.enter(waitCtx, !a.canWait, a.h, a.ttl, a.lease)
	if ok && a.h == nil {
		a.h = newLease(hd, under, max(req.Weight, 1))
	}
	if !ok {
		if err != nil && ctx.Err() != nil {
			return nil, CtxErr(ctx)
		}
		a.timedOut = a.canWait
		return nil, nil
	}
	a.h.parent, a.h.maxHold = ctx, req.MaxHold
	if a.h.maxHold == 0 {
		a.h.maxHold = hd.e.Cfg.MaxHold
	}
	a.waitCtx = waitCtx
	switch {
	case b.field != "":
		// The holder before us passed us its Redis hold as it is.
		ok, err = a.adopt(ctx, b)
	case b.token != 0:
		// The holder before us passed us the hold with the gate: Redis
		// granted it in the release's own script, from b.sent on.
		a.h.spare = b.spare
		ok, err = a.grant(ctx, b.token, b.sent)
	default:
		ok, err = a.run(ctx, waitCtx)
	}
	if !a.granted {
		a.h.finish() // frees the gate
	}
	if !ok {
		return nil, err
	}
	return a.h, nil
}

// orReentered counts one more hold of again (when not nil) for a call that
// found it in ctx.
func orReentered(err error, again *Lease, ctx context.Context, lease, maxHold time.Duration) error {
	if err != nil {
		return err
	}
	return again.reenter(ctx, lease, maxHold)
}

// acquisition is the waiting state machine of one new lease, the same for
// every kind: attempt, subscribe, queue, wait for a hand-off or a release
// message or a re-check, attempt again.
type acquisition struct {
	h        *Lease
	waitCtx  context.Context // ctx bounded by the wait
	lease    time.Duration
	ttl      time.Duration // the lease, or the watchdog timeout
	canWait  bool
	w        *notify.Waiter
	q        Queueing
	pop      *pop // the waiter pops its hand-off (pop.go); nil when not
	answered bool // Redis answered an attempt: a wait that runs out is contention, not an outage
	timedOut bool
	granted  bool
	reentry  bool
}

func (a *acquisition) run(ctx, waitCtx context.Context) (bool, error) {
	e := a.h.e
	if e.Cfg.SpinMin > 0 {
		return a.spin(ctx, waitCtx)
	}
	defer a.leaveHub()
	// When the engine already listens for this lock's hand-offs (a hot lock:
	// this process waits, or waited a moment ago, for it), the first attempt
	// also queues the caller if the lock is taken: no second round trip. A
	// lock that is not known to be contended is tried first, which costs
	// nothing more when it is free: no waiter to register, no SUBSCRIBE.
	if a.canWait && !e.hub.Quiet() {
		if ch, _ := a.h.p.Channel(); e.hub.Listening(ch, a.h.p.Key()) {
			if err := a.join(waitCtx); err != nil {
				return a.failed(ctx, err, false)
			}
		}
	}
	r, sent, left, err := a.try(waitCtx)
	switch {
	case err != nil:
		return a.failed(ctx, err, left)
	case r.Granted:
		return a.grant(ctx, r.Token, sent)
	case !a.canWait:
		return false, nil
	case a.w == nil:
		// Subscribe before the attempt that queues us, so that the hand-off
		// (or Redisson's release message) cannot be missed.
		if err := a.join(waitCtx); err != nil {
			return a.failed(ctx, err, false)
		}
		if r, sent, left, err = a.try(waitCtx); err != nil {
			return a.failed(ctx, err, left)
		}
		if r.Granted {
			return a.grant(ctx, r.Token, sent)
		}
	}
	return a.wait(ctx, waitCtx, r)
}

// wait waits for a hand-off, a release message or the next re-check, and
// tries again, until granted or waitCtx is done.
func (a *acquisition) wait(ctx, waitCtx context.Context, r Reply) (bool, error) {
	timer := time.NewTimer(a.sleep(r))
	defer timer.Stop()
	for {
		select {
		case <-a.w.C:
			if notify.Tracing {
				notify.Trace(a.h.e.Cfg.ClientID, notify.HopWake)
			}
			// A message only wakes us, even one that says the lock was
			// handed to us: anyone may publish it. The attempt below is
			// what tells, and it gives a hand-off its full TTL.
			ev := a.w.Take()
			switch {
			case ev.Closed:
				a.giveUp()
				return false, ErrClosed
			case !ev.Retry:
				continue
			}
			a.q.Handoff = ev.Handoff
		case p := <-a.popC():
			if notify.Tracing && p.err == nil {
				notify.Trace(a.h.e.Cfg.ClientID, notify.HopWake)
			}
			wasStalled := a.stalled()
			if token, claim, ok := a.popAnswered(p); ok {
				return a.grantPopped(ctx, token, claim)
			}
			if a.stalled() && !wasStalled {
				// Brought forward once, when the waiter stalls: a pop that
				// fails again and again must not put the re-check off.
				timer.Reset(a.sleep(Reply{Wait: -1}))
			}
			continue
		case <-timer.C:
		case <-waitCtx.Done():
			// A hand-off that raced the cancellation or the deadline is
			// passed on by the kind's Undo.
			return a.over(ctx)
		}
		if notify.Tracing {
			notify.Trace(a.h.e.Cfg.ClientID, notify.HopClaim)
		}
		r, sent, left, err := a.try(waitCtx)
		if notify.Tracing {
			notify.Trace(a.h.e.Cfg.ClientID, notify.HopReply)
		}
		if err != nil {
			return a.failed(ctx, err, left)
		}
		// A scout's attempt tells the other readers whether to try too
		// (notify's scout.go).
		a.h.e.hub.Tried(a.w, r.Granted)
		if r.Granted {
			// Taken by our own attempt, or handed to us: either way the
			// attempt gave the lease its TTL after sent, and the token is
			// the one Redis issued.
			return a.grant(ctx, r.Token, sent)
		}
		timer.Reset(a.sleep(r))
	}
}

// over ends a wait whose waitCtx is done: ctx's cause when ctx ended, else
// a wait that ran out.
func (a *acquisition) over(ctx context.Context) (bool, error) {
	a.giveUp()
	if ctx.Err() != nil {
		return false, CtxErr(ctx)
	}
	a.timedOut = true
	return false, nil
}

// attemptUndo is the Undo of an attempt whose caller left before its reply:
// what it may have granted or queued is taken back once the reply is in.
// The attempt's queueing travels in the lease (h.q).
type attemptUndo Lease

func (u *attemptUndo) Undo(ctx context.Context, cmd redis.Cmder) {
	h := (*Lease)(u)
	r, err := h.p.AttemptReply(cmd, 0)
	if err == nil && !r.Granted && h.q.Entry == "" {
		return // neither queued nor granted
	}
	h.p.Undo(ctx, h, h.q, err != nil || r.Granted)
}

// try sends one attempt. If the caller leaves before the reply, the attempt
// is undone once it returns (attemptUndo), or not sent at all.
func (a *acquisition) try(ctx context.Context) (Reply, time.Time, bool, error) {
	h := a.h
	sent := time.Now()
	h.q = a.q
	cl := h.p.Attempt(h, a.ttl, 0, a.q)
	a.q.Handoff = false // a hint for this attempt only
	cl.Droppable, cl.Undo = true, (*attemptUndo)(h)
	if left, err := h.e.Wire.Do(ctx, cl); left {
		return Reply{}, sent, true, err
	}
	r, err := h.p.AttemptReply(cl.Cmd, 0)
	cl.Free()
	if err != nil {
		return r, sent, false, err
	}
	a.answered = true
	if a.q.Entry != "" {
		a.q.Registered = true
		if !r.Granted {
			a.queued(sent)
		}
	}
	return r, sent, false, nil
}

// failed ends an acquisition whose attempt or subscription failed. The
// attempt may have queued or even granted us with its reply lost: unless
// the wire undoes it (left), it is undone here, in the background. The
// wire undoes only a call it sent: one it dropped, unsent, leaves the entry
// that an earlier attempt queued, so a waiter that left with its entry
// queued leaves the queue here too (as giveUp; a second Undo of a call
// sent finds nothing more to undo). The
// wait's own deadline is never reported as the caller's: while ctx is live,
// a wait that ran out (in a call the wire left, or in the subscription) is
// (false, nil) when Redis answered, else ErrUnavailable.
func (a *acquisition) failed(ctx context.Context, err error, left bool) (bool, error) {
	if !left {
		h, q := a.h, a.q
		h.e.Detach(func(dctx context.Context) { h.p.Undo(dctx, h, q, true) })
	} else if a.q.Registered {
		a.giveUp()
	}
	waitOver := left || a.waitCtx != nil && a.waitCtx.Err() != nil && err == context.Cause(a.waitCtx)
	switch {
	case ctx.Err() != nil && left && !a.answered:
		// Redis never answered this acquisition: say so, and keep ctx's
		// cause for errors.Is.
		return false, fmt.Errorf("%w (lock %q): %w", ErrUnavailable, a.h.name, CtxErr(ctx))
	case ctx.Err() != nil:
		return false, CtxErr(ctx)
	case waitOver && a.answered:
		a.timedOut = true // the wait ran out while Redis was answering
		return false, nil
	case waitOver:
		return false, fmt.Errorf("%w within the wait of %q", ErrUnavailable, a.h.name)
	}
	return false, a.h.e.WrapClosed(unanswered(a.h.name, err))
}

// giveUp leaves the wait queue in the background; the kind's Undo passes on
// a hand-off that reached us meanwhile.
func (a *acquisition) giveUp() {
	if a.q.Entry == "" {
		return
	}
	h, q := a.h, a.q
	h.e.Detach(func(ctx context.Context) { h.p.Undo(ctx, h, q, false) })
}

// grant turns a granted attempt into a lease of the handle.
func (a *acquisition) grant(ctx context.Context, token uint64, sent time.Time) (bool, error) {
	h := a.h
	if time.Since(sent) > a.ttl/3 {
		// The grant took long to arrive (a cold connection, a slow link):
		// too little of its TTL is left to vouch for it. One renewal
		// confirms it, counted from that call, before anyone relies on it.
		var err error
		if sent, err = a.confirmFirst(ctx); err != nil {
			return false, err
		}
	}
	return a.hold(ctx, func() bool { return h.granted(token, sent, a.lease) })
}

// confirmFirst renews a grant before anyone relies on it (confirm); when
// that fails, the grant is undone in the background, and, as nobody holds,
// Acquire finishes the lease, which frees the gate.
func (a *acquisition) confirmFirst(ctx context.Context) (time.Time, error) {
	h := a.h
	sent, err := h.confirm(ctx, a.ttl)
	if err != nil {
		h.e.Detach(func(dctx context.Context) {
			h.pendingCheck().wait(dctx) // a passed hold's check reads the field first (pass.go)
			h.p.Undo(dctx, h, Queueing{}, true)
		})
		if h.e.closed.Load() {
			err = ErrClosed
		}
	}
	return sent, err
}

// hold finishes a grant: begin starts the lease's bookkeeping (false once
// Close has begun), then the lease occupies the handle and, when asked
// for, is confirmed on the replicas. From here on the lease's own release
// frees the gate, whatever happens (granted).
func (a *acquisition) hold(ctx context.Context, begin func() bool) (bool, error) {
	h := a.h
	a.granted = true
	if !begin() {
		// Close has begun and already released what it knew of.
		h.end(lossError(h.name, ErrClosed, nil), nil)
		_ = h.Release(ctx, true)
		return false, ErrClosed
	}
	h.handle.occupy(h)
	if h.e.Cfg.Replicas > 0 {
		if err := h.confirmReplicas(ctx); err != nil {
			_ = h.Release(ctx, true)
			return false, err
		}
	}
	return true, nil
}

// confirm renews a grant the caller has not seen yet, and returns when the
// renewal was sent: the lease is certain for ttl from then. A grant that is
// no longer ours is an error wrapping ErrLockLost; nobody relied on it.
func (h *Lease) confirm(ctx context.Context, ttl time.Duration) (time.Time, error) {
	sent := time.Now()
	code, _, err := wire.Go(h.e.Wire, ctx, func(ctx context.Context) (int64, error) {
		code, _, err := h.renewOnce(ctx, ttl)
		return code, err
	}, nil)
	switch {
	case err != nil:
		return sent, err
	case code != renew.Held:
		return sent, lossError(h.name, GoneReason(code), nil)
	}
	return sent, nil
}

// join registers the caller with the engine's pub/sub hub and makes its
// queue entry, when its kind queues.
func (a *acquisition) join(ctx context.Context) error {
	h := a.h
	var err error
	if ch, shared := h.p.Channel(); shared {
		a.w, err = h.e.hub.JoinShared(ctx, ch, h.p.Key())
	} else {
		a.w, err = h.e.hub.Join(ctx, ch, h.p.Key())
	}
	if err != nil {
		return err
	}
	// A waiter that pops has its marked entry (startPop); any other the
	// kind's own.
	if a.startPop(); a.pop == nil {
		a.q.Entry = h.p.Entry(a.w.Ticket, a.ttl, h)
	}
	return nil
}

func (a *acquisition) leaveHub() {
	a.stopPop()
	if a.w != nil {
		a.h.e.hub.Leave(a.w)
	}
}

// sleep is how long to wait before trying again on our own: until the
// holder's TTL ends or the re-check interval passes (which bounds how long
// a crashed queued waiter can stall the lock).
func (a *acquisition) sleep(r Reply) time.Duration {
	d := a.h.e.Cfg.Recheck
	if r.Wait >= 0 {
		d = min(d, r.Wait)
	}
	if a.stalled() {
		// Nothing tells this waiter of a hand-off: it looks for one four
		// times per claim window, so one made to it is taken in time.
		d = min(d, a.h.e.Cfg.Claim/4)
	}
	return max(d, time.Millisecond)
}
