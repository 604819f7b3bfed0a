package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/renew"
)

// lockRequest is one lock call's wait and lease.
type lockRequest struct {
	wait, lease time.Duration
	forever     bool          // Lock: wait as long as ctx allows
	maxHold     time.Duration // 0: the Client's WithMaxHold; < 0: unbounded
}

// lock is every lock call of a handle: a re-entry when ctx carries a hold of
// the name by this Client, else a new hold through the handle's gate. It
// returns the hold, or nil and a nil error when the wait ran out.
func (hd *handle) lock(ctx context.Context, req lockRequest) (h *hold, err error) {
	if err := hd.check(ctx, req.lease); err != nil {
		return nil, err
	}
	c := hd.c
	start := time.Now()
	reentry, timedOut := false, false
	if len(c.cfg.observers) > 0 {
		finish := c.observeAcquire(ctx, hd.p.kind(), hd.name)
		defer func() {
			finish(Acquisition{Kind: hd.p.kind(), Name: hd.name, Acquired: h != nil, TimedOut: timedOut,
				Err: err, Waited: time.Since(start), Reentry: reentry, Backend: BackendRedis})
		}()
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	again, under, err := hd.inherited(ctx)
	if err != nil {
		return nil, err
	}
	if again != nil {
		reentry = true
		if err := again.reenter(ctx, req.lease); err != nil {
			return nil, err
		}
		return again, nil
	}
	// The wait bounds the whole call, network time included.
	canWait := req.forever || req.wait > 0
	waitCtx := ctx
	if !req.forever && req.wait > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithDeadline(ctx, start.Add(req.wait))
		defer cancel()
	}
	if ok, err := hd.enter(waitCtx, !canWait); !ok {
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		timedOut = canWait
		return nil, nil
	}
	h = newHold(hd, under)
	h.parent = ctx
	h.maxHold = req.maxHold
	if h.maxHold == 0 {
		h.maxHold = c.cfg.maxHold
	}
	a := acquisition{h: h, lease: req.lease, canWait: canWait, ttl: req.lease}
	if req.lease <= 0 {
		a.ttl = c.cfg.watchdog
	}
	ok, err := a.run(ctx, waitCtx)
	timedOut = a.timedOut
	if !a.granted {
		h.finish() // frees the gate
	}
	if !ok {
		return nil, err
	}
	return h, nil
}

// acquisition is the waiting state machine of one new hold, the same for
// every lock kind: attempt, subscribe, queue, wait for a hand-off or a
// release message or a re-check, attempt again.
type acquisition struct {
	h        *hold
	lease    time.Duration
	ttl      time.Duration // the lease, or the watchdog timeout
	canWait  bool
	w        *notify.Waiter
	q        queueing
	answered bool // Redis answered an attempt: a wait that runs out is contention, not an outage
	timedOut bool
	granted  bool
}

func (a *acquisition) run(ctx, waitCtx context.Context) (bool, error) {
	c := a.h.c
	if c.cfg.spinMin > 0 {
		return a.spin(ctx, waitCtx)
	}
	defer a.leaveHub()
	// When the client already listens for this lock's hand-offs (a hot lock:
	// this process waits, or waited a moment ago, for it), the first attempt
	// also queues the caller if the lock is taken: no second round trip. A
	// lock that is not known to be contended is tried first, which costs
	// nothing more when it is free: no waiter to register, no SUBSCRIBE.
	if a.canWait && c.hub.Listening(a.h.p.channel(a.h)) {
		if err := a.join(waitCtx); err != nil {
			return a.failed(ctx, err, false)
		}
	}
	r, sent, left, err := a.try(waitCtx)
	if err != nil {
		return a.failed(ctx, err, left)
	}
	if r.v[0] == 1 {
		return a.grant(ctx, uint64(r.v[2]), sent)
	}
	if !a.canWait {
		return false, nil
	}
	if a.w == nil {
		// Subscribe before the attempt that queues us, so that the hand-off
		// (or Redisson's release message) cannot be missed.
		if err := a.join(waitCtx); err != nil {
			return a.failed(ctx, err, false)
		}
		if r, sent, left, err = a.try(waitCtx); err != nil {
			return a.failed(ctx, err, left)
		}
		if r.v[0] == 1 {
			return a.grant(ctx, uint64(r.v[2]), sent)
		}
	}
	return a.wait(ctx, waitCtx, r)
}

// wait waits for a hand-off, a release message or the next re-check, and
// tries again, until granted or waitCtx is done.
func (a *acquisition) wait(ctx, waitCtx context.Context, r reply) (bool, error) {
	timer := time.NewTimer(a.sleep(r))
	defer timer.Stop()
	for {
		select {
		case <-a.w.C:
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
		case <-timer.C:
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				// A hand-off that raced the cancellation is passed on by
				// leave.lua.
				a.giveUp()
				return false, context.Cause(ctx)
			}
			// The wait is over. A hand-off that raced the deadline is
			// passed on by leave.lua, like one that raced a cancellation.
			a.giveUp()
			a.timedOut = true
			return false, nil
		}
		var sent time.Time
		var left bool
		var err error
		if r, sent, left, err = a.try(waitCtx); err != nil {
			return a.failed(ctx, err, left)
		}
		if r.v[0] == 1 {
			// Taken by our own attempt, or handed to us: either way the
			// attempt gave the hold its TTL after sent, and the token is
			// the one Redis issued.
			return a.grant(ctx, uint64(r.v[2]), sent)
		}
		timer.Reset(a.sleep(r))
	}
}

// try sends one attempt. If the caller leaves before the reply, the attempt
// is undone once it returns (see Client.abandoned), or not sent at all.
func (a *acquisition) try(ctx context.Context) (reply, time.Time, bool, error) {
	h := a.h
	sent := time.Now()
	cmd, s := h.p.attempt(h, a.ttl, 0, a.q)
	cl := newCall(cmd, s)
	cl.op, cl.h, cl.q = opAttempt, h, a.q
	if left, err := h.c.batch.do(ctx, cl); left {
		return reply{}, sent, true, err
	}
	r, err := h.p.attemptReply(cmd, 0)
	cl.free()
	if err != nil {
		return r, sent, false, err
	}
	switch {
	case r.n == 3 && r.v[0] == 1, r.n == 2 && r.v[0] == 0:
	case r.n == 1 && r.v[0] == -2:
		return r, sent, false, ErrUpgrade
	default:
		return r, sent, false, fmt.Errorf("dlock: unexpected acquire reply %v", r)
	}
	a.answered = true
	if a.q.entry != "" {
		a.q.registered = true
	}
	return r, sent, false, nil
}

// attemptNow sends one attempt for h and reads its reply, with nothing
// undone if ctx ends first: for tests.
func (h *hold) attemptNow(ctx context.Context, ttl time.Duration, count int, q queueing) (reply, error) {
	cmd, s := h.p.attempt(h, ttl, count, q)
	cl := newCall(cmd, s)
	if left, err := h.c.batch.do(ctx, cl); left {
		return reply{}, err
	}
	defer cl.free()
	return h.p.attemptReply(cmd, count)
}

// abandoned undoes or finishes a call whose caller left before its reply,
// once the reply is in: an attempt that may have granted or queued is
// undone, a re-entry counted back down, a release's bookkeeping done. It
// runs on a goroutine of its own, counted for Close.
func (c *Client) abandoned(cl *call) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.cleanupTimeout)
	defer cancel()
	h := cl.h
	switch cl.op {
	case opAttempt:
		r, err := h.p.attemptReply(cl.cmd, 0)
		if err == nil && r.v[0] != 1 && cl.q.entry == "" {
			return // neither queued nor granted
		}
		h.undo(ctx, cl.q, err != nil || r.v[0] == 1)
	case opReenter:
		// A re-entry that happened is counted back down before the hold
		// takes its next count-changing call.
		defer h.endTurn()
		if r, err := h.p.attemptReply(cl.cmd, cl.count); err == nil && r.v[0] == 1 {
			_, _ = h.releaseNow(ctx, cl.count+1, false)
		}
	case opRelease:
		_ = h.released(cl)
	}
}

// failed ends an acquisition whose attempt or subscription failed. The
// attempt may have queued or even granted us with its reply lost: unless
// roundTrip undoes it (left), it is undone here, in the background.
func (a *acquisition) failed(ctx context.Context, err error, left bool) (bool, error) {
	if !left {
		h, q := a.h, a.q
		h.c.detach(func(dctx context.Context) { h.undo(dctx, q, true) })
	}
	switch {
	case ctx.Err() != nil:
		return false, context.Cause(ctx)
	case left && a.answered:
		a.timedOut = true // the wait ran out while Redis was answering
		return false, nil
	case left:
		return false, fmt.Errorf("%w within the wait of %q", ErrUnavailable, a.h.name)
	}
	return false, a.h.c.wrapClosed(err)
}

// giveUp leaves the wait queue in the background; leave.lua passes on a
// hand-off that reached us meanwhile.
func (a *acquisition) giveUp() {
	if a.q.entry == "" {
		return
	}
	h, q := a.h, a.q
	h.c.detach(func(ctx context.Context) { h.undo(ctx, q, false) })
}

// grant turns a granted attempt or hand-off into a hold of the handle.
func (a *acquisition) grant(ctx context.Context, token uint64, sent time.Time) (bool, error) {
	h := a.h
	a.granted = true
	ttl := a.ttl
	if time.Since(sent) > ttl/3 {
		// The grant took long to arrive (a cold connection, a slow link):
		// too little of its TTL is left to vouch for it. One renewal
		// confirms it, counted from that call, before anyone relies on it.
		var err error
		if sent, err = h.confirm(ctx, ttl); err != nil {
			h.c.detach(func(dctx context.Context) { h.undo(dctx, queueing{}, true) })
			if h.c.closed.Load() {
				err = ErrClosed
			}
			return false, err
		}
	}
	if !h.granted(token, sent, a.lease) {
		// Close has begun and already released what it knew of.
		h.end(lossError(h.name, ErrClosed, nil), nil)
		_ = h.c.releaseDetached(ctx, h, true)
		return false, ErrClosed
	}
	h.handle.occupy(h)
	if h.c.cfg.replicas > 0 {
		if err := h.confirmReplicas(ctx); err != nil {
			_ = h.c.releaseDetached(ctx, h, true)
			return false, err
		}
	}
	return true, nil
}

// confirm renews a grant the caller has not seen yet, and returns when the
// renewal was sent: the hold is certain for ttl from then. A grant that is
// no longer ours is an error wrapping ErrLockLost; nobody relied on it.
func (h *hold) confirm(ctx context.Context, ttl time.Duration) (time.Time, error) {
	sent := time.Now()
	code, _, err := roundTrip(h.c, ctx, func(ctx context.Context) (int64, error) {
		code, _, err := h.renewOnce(ctx, ttl)
		return code, err
	}, nil)
	switch {
	case err != nil:
		return sent, err
	case code != renew.Held:
		return sent, lossError(h.name, goneReason(code), nil)
	}
	return sent, nil
}

// join registers the caller with the Client's pub/sub hub and makes its
// queue entry: Mutex and FairMutex waiters queue for a hand-off, writers
// register as waiting (which holds new readers back), readers do neither.
func (a *acquisition) join(ctx context.Context) error {
	h := a.h
	var err error
	if h.p.shared() {
		a.w, err = h.c.hub.JoinShared(ctx, h.p.channel(h))
	} else {
		a.w, err = h.c.hub.Join(ctx, h.p.channel(h))
	}
	if err != nil {
		return err
	}
	switch h.p.(type) {
	case mutexProtocol:
		a.q.entry = keys.QueueEntry(a.w.Ticket, ms(a.ttl), h.ownerField)
	case writeProtocol:
		a.q.entry = "w"
	}
	return nil
}

func (a *acquisition) leaveHub() {
	if a.w != nil {
		a.h.c.hub.Leave(a.w)
	}
}

// sleep is how long to wait before trying again on our own: until the
// holder's TTL ends (a PTTL of 0 is the lock's last millisecond) or the
// re-check interval passes (which bounds how long a crashed queued waiter
// can stall the lock).
func (a *acquisition) sleep(r reply) time.Duration {
	d := a.h.c.cfg.recheck
	if pttl := time.Duration(r.v[1]) * time.Millisecond; pttl >= 0 {
		d = min(d, pttl)
	}
	return max(d, time.Millisecond)
}

// undo takes back what an attempt of h may have left in Redis: its queue
// entry (passing on a hand-off that reached it) and, when mayHold, a grant
// whose reply was lost.
func (h *hold) undo(ctx context.Context, q queueing, mayHold bool) {
	if _, mutex := h.p.(mutexProtocol); !mutex && mayHold {
		if _, err := h.releaseNow(ctx, 1, true); err != nil {
			h.c.cfg.logger.Debug("dlock: giving back an unclaimed grant failed; it expires", "name", h.name, "err", err)
		}
	}
	if q.entry == "" && !mayHold {
		return
	}
	if cmd := h.p.leave(ctx, h, q); cmd != nil {
		if err := cmd.Err(); err != nil {
			h.c.cfg.logger.Debug("dlock: leaving the wait queue failed; the entry expires", "name", h.name, "err", err)
		}
	}
}
