package dlock

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/notify"
)

var (
	//go:embed scripts/sem_lib.lua
	luaSemLib string
	//go:embed scripts/sem_acquire.lua
	luaSemAcquire string
	//go:embed scripts/sem_release.lua
	luaSemRelease string
	//go:embed scripts/sem_leave.lua
	luaSemLeave string

	scriptSemAcquire = newScript(luaSemLib + luaSemAcquire)
	scriptSemRelease = newScript(luaSemLib + luaSemRelease)
	scriptSemLeave   = newScript(luaSemLib + luaSemLeave)
)

// semMismatch is sem_acquire.lua's answer when the semaphore is live with
// another number of permits.
const semMismatch = -3

// Semaphore is a handle on a semaphore of n permits shared by every process
// that uses the same name: at most n holders at once. Each permit is leased
// like a lock and ends with its holder (Redisson's
// RPermitExpirableSemaphore): renewed by the Client's watchdog when acquired
// with lease <= 0, expiring after a fixed lease otherwise, so the permit of
// a holder that crashed or was cut off comes back when its TTL runs out.
//
// Waiting is event-driven, with the Mutex's direct hand-off: a waiter queues
// itself, and a release gives the freed permit straight to the first queued
// waiter and wakes only that waiter's process. A released permit wakes one
// waiter, not all of them.
//
// The number of permits is fixed while the semaphore has holders or queued
// waiters: an Acquire asking for another number then fails with
// ErrInvalidArgument. Once it is idle (no permit held, nobody queued) the
// next Acquire sets the number anew.
//
// Redis layout: dlock:semaphore:{name}, a sorted set of permit ids
// ("<client id>:<n>", new for every permit) scored by their expiry in
// milliseconds of the Redis server's clock (client clocks do not matter);
// dlock:semaphore-size:{name}, the number of permits;
// dlock:semaphore-queue:{name}, the waiters' queue (the Mutex's entry
// format); waiters listen on their Client's channel and on
// dlock:semaphore-free:{name}. Every key has a TTL at least as long as the
// longest permit (the queue: four re-check intervals, refreshed by its
// waiters). A name with a hash tag T uses "dlock:semaphore:{T}:name".
//
// A Semaphore is safe for concurrent use.
type Semaphore struct {
	c    *Client
	name string
	n    int
	ks   keys.SemaphoreSet
	keys []any
	err  error // bad name or number, reported by Acquire
}

// Semaphore returns a handle on the semaphore name of permits permits. A bad
// name or a number below one is reported (ErrInvalidArgument) by Acquire.
func (c *Client) Semaphore(name string, permits int) *Semaphore {
	s := &Semaphore{c: c, name: name, n: permits}
	if err := keys.Validate(name); err != nil {
		s.err = fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		return s
	}
	if permits <= 0 {
		s.err = fmt.Errorf("%w: semaphore %q needs at least one permit, got %d", ErrInvalidArgument, name, permits)
		return s
	}
	s.ks = keys.Semaphore(name)
	s.keys = []any{s.ks.Permits, s.ks.Size, s.ks.Queue}
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the number of permits the handle was made with.
func (s *Semaphore) Permits() int { return s.n }

// Acquire takes a permit, waiting up to wait for one: wait <= 0 makes one
// attempt. lease > 0 makes the permit expire lease after the grant, never
// renewed; lease <= 0 selects watchdog mode (the permit's TTL is the
// watchdog timeout, renewed every third of it until Release).
//
// It returns the permit, or an error: one wrapping ErrWaitTimeout when no
// permit came within the wait, ErrInvalidArgument for bad input (also when
// the semaphore is live with another number of permits), ErrClosed,
// ErrUnavailable when Redis did not answer within the wait, or ctx's cause.
// The wait bounds the whole call, network time included, and Acquire
// returns as soon as ctx is done; what it left in Redis (a queue entry, a
// permit granted as it left) is undone in the background.
// Safe for concurrent use.
func (s *Semaphore) Acquire(ctx context.Context, wait, lease time.Duration) (*Permit, error) {
	switch {
	case ctx == nil:
		return nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case s.err != nil:
		return nil, s.err
	case lease > 0 && lease < time.Millisecond:
		return nil, fmt.Errorf("%w: lease %v is below Redis' 1ms resolution", ErrInvalidArgument, lease)
	case s.c.closed.Load():
		return nil, ErrClosed
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	}
	start := time.Now()
	a := semWait{s: s, p: newPermit(s, lease), ttl: lease, canWait: wait > 0, wait: wait}
	if lease <= 0 {
		a.ttl = s.c.cfg.watchdog
	}
	waitCtx := ctx
	if a.canWait {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithDeadline(ctx, start.Add(wait))
		defer cancel()
	}
	return a.run(ctx, waitCtx)
}

// semWait is one Acquire's waiting: attempt, subscribe and queue, wait for
// a hand-off, a "permit freed" message or the next re-check, attempt again.
type semWait struct {
	s        *Semaphore
	p        *Permit
	ttl      time.Duration
	wait     time.Duration
	canWait  bool
	w        *notify.Waiter
	entry    string
	answered bool
}

func (a *semWait) run(ctx, waitCtx context.Context) (*Permit, error) {
	c := a.s.c
	defer func() {
		if a.w != nil {
			c.hub.Leave(a.w)
		}
	}()
	// When the client already listens for hand-offs, the first attempt also
	// queues the caller: no second round trip.
	if a.canWait && c.hub.Ready() {
		if err := a.join(waitCtx); err != nil {
			return a.failed(ctx, err, false)
		}
	}
	r, sent, left, err := a.try(waitCtx)
	if err != nil {
		return a.failed(ctx, err, left)
	}
	if r.v[0] == 1 {
		return a.grant(ctx, sent)
	}
	if !a.canWait {
		return nil, a.timeout()
	}
	if a.w == nil {
		// Subscribe before the attempt that queues us, so that the hand-off
		// cannot be missed.
		if err := a.join(waitCtx); err != nil {
			return a.failed(ctx, err, false)
		}
		if r, sent, left, err = a.try(waitCtx); err != nil {
			return a.failed(ctx, err, left)
		}
		if r.v[0] == 1 {
			return a.grant(ctx, sent)
		}
	}
	timer := time.NewTimer(a.sleep(r))
	defer timer.Stop()
	for {
		select {
		case <-a.w.C:
			// A message only wakes us (anyone may publish one); the attempt
			// below tells whether a permit was handed to us.
			ev := a.w.Take()
			switch {
			case ev.Closed:
				a.giveUp()
				return nil, ErrClosed
			case !ev.Retry:
				continue
			}
		case <-timer.C:
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				a.giveUp() // sem_leave.lua passes on a permit handed to us meanwhile
				return nil, context.Cause(ctx)
			}
			a.giveUp() // sem_leave.lua passes on a permit handed to us meanwhile
			return nil, a.timeout()
		}
		if r, sent, left, err = a.try(waitCtx); err != nil {
			return a.failed(ctx, err, left)
		}
		if r.v[0] == 1 {
			// Our attempt, or a hand-off it found: either way the attempt
			// gave the permit its full TTL after sent.
			return a.grant(ctx, sent)
		}
		timer.Reset(a.sleep(r))
	}
}

func (a *semWait) timeout() error {
	return fmt.Errorf("%w: no permit of %q within %v", ErrWaitTimeout, a.s.name, max(a.wait, 0))
}

// join registers with the Client's hub and makes the queue entry.
func (a *semWait) join(ctx context.Context) error {
	w, err := a.s.c.hub.Join(ctx, a.s.ks.Free)
	if err != nil {
		return err
	}
	a.w = w
	a.entry = keys.QueueEntry(w.Ticket, ms(a.ttl), a.p.id)
	return nil
}

// try sends one attempt; if the caller leaves before the reply, what it did
// is undone once it returns.
func (a *semWait) try(ctx context.Context) (reply, time.Time, bool, error) {
	s, p, entry, c := a.s, a.p, a.entry, a.s.c
	sent := time.Now()
	r, left, err := roundTrip(c, ctx, func(ctx context.Context) (reply, error) {
		return readReply(scriptSemAcquire.run(ctx, c, s.keys, p.id, s.n, ms(a.ttl), entry, c.arg.queueTTLMs, c.arg.claimMs))
	}, func(ctx context.Context, r reply, err error) {
		if err == nil && r.v[0] != 1 && entry == "" {
			return // neither queued nor granted
		}
		p.undo(ctx, entry)
	})
	if err != nil {
		return r, sent, left, err
	}
	switch {
	case r.n == 2 && (r.v[0] == 1 || r.v[0] == 0):
	case r.n == 2 && r.v[0] == semMismatch:
		return r, sent, false, fmt.Errorf("%w: semaphore %q has %d permits while it has holders or waiters, not %d",
			ErrInvalidArgument, s.name, r.v[1], s.n)
	default:
		return r, sent, false, fmt.Errorf("dlock: unexpected semaphore reply %v", r.v[:r.n])
	}
	a.answered = true
	return r, sent, false, nil
}

// failed ends an Acquire whose attempt or subscription failed; an attempt
// whose reply was lost may have queued or granted us, which is undone.
func (a *semWait) failed(ctx context.Context, err error, left bool) (*Permit, error) {
	if !left {
		p, entry := a.p, a.entry
		a.s.c.detach(func(dctx context.Context) { p.undo(dctx, entry) })
	}
	switch {
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case left && a.answered:
		return nil, a.timeout()
	case left:
		return nil, fmt.Errorf("%w within the wait for semaphore %q", ErrUnavailable, a.s.name)
	}
	return nil, a.s.c.wrapClosed(err)
}

func (a *semWait) giveUp() {
	if a.entry == "" {
		return
	}
	p, entry := a.p, a.entry
	a.s.c.detach(func(ctx context.Context) { p.undo(ctx, entry) })
}

func (a *semWait) grant(ctx context.Context, sent time.Time) (*Permit, error) {
	p := a.p
	if !p.granted(sent) {
		p.end(lossError(a.s.name, ErrClosed, nil))
		_ = p.Release(context.WithoutCancel(ctx))
		return nil, ErrClosed
	}
	return p, nil
}

// sleep is how long to wait before trying again unprompted: until the first
// permit expires, or the re-check interval.
func (a *semWait) sleep(r reply) time.Duration {
	d := a.s.c.cfg.recheck
	if left := time.Duration(r.v[1]) * time.Millisecond; left >= 0 {
		d = min(d, left+time.Millisecond)
	}
	return max(d, time.Millisecond)
}
