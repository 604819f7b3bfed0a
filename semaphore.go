package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
)

// Semaphore is a handle on a semaphore of permits shared by every process
// that uses the same name: at most its size in permits held at once. A
// Permit holds one permit (Acquire) or several (AcquireN). Each is leased
// like a lock and ends with its holder (Redisson's
// RPermitExpirableSemaphore): renewed by the Client's watchdog when acquired
// with lease <= 0, expiring after a fixed lease otherwise, so the permits of
// a holder that crashed or was cut off come back when their TTL runs out.
//
// Waiting is event-driven, with the Mutex's direct hand-off, in arrival
// order as golang.org/x/sync/semaphore.Weighted: a waiter queues itself,
// and a release (or SetPermits growing the size) gives the freed permits
// straight to the queued waiters from the first one on while they fit, and
// wakes only their processes: a waiter with a watchdog lease finds its
// permit as the reply to its own blocking pop of its box, as a Mutex waiter
// does (see Mutex), any other by a message that its next attempt confirms.
// A waiter for many permits is not overtaken by waiters for fewer that came
// after it.
//
// The size: the number given to Client.Semaphore initialises it when the
// semaphore does not exist in Redis yet (its first Acquire). From then on only
// SetPermits changes it: an Acquire through a handle made with another number
// uses the size Redis has. The size lives as long as the semaphore's permits
// and queue, and at least four re-check intervals (12s by default) after it
// was set (by the first Acquire or SetPermits); a semaphore left idle (no
// permit held, nobody queued) past that forgets it with its other keys, and
// the next Acquire initialises it again from its handle.
//
// Redis layout: dlock:semaphore:{name}, a sorted set of permit ids scored
// by their expiry in milliseconds of the Redis server's clock (client
// clocks do not matter): "<client id>:<n>", new for every permit, with
// "#<k>" appended for a permit of k > 1 permits; dlock:semaphore-size:{name},
// the size; dlock:semaphore-queue:{name}, the waiters' queue (the Mutex's
// entry format, whose permit id tells how many permits each waits for);
// dlock:semaphore-seen:{name}, a sorted set of queue entries scored by the
// server time until which their waiter counts as alive (a first waiter
// that does not fit and has not tried again by then is dropped, so a
// crashed waiter for many permits cannot stall the queue), and of entries
// granted lately, scored by minus their permit's deadline when granted (a
// mark that a resent queueing call finds, so that it does not queue its
// waiter again beside its permit); dlock:semaphore-queue:{name}\x1fg:<permit
// id>, a popping waiter's box, which lives the claim window. Waiters
// listen on their Client's channel and on dlock:semaphore-free:{name}.
// Every key but the boxes has a TTL at least as long as the longest
// permit (the queue and its seen set: four re-check intervals, refreshed
// by its waiters; the seen set also at least the TTL of a permit that a
// first queueing call took at once, whose mark it holds). A name with a hash tag T uses "dlock:semaphore:{T}:name".
//
// A Semaphore is safe for concurrent use.
type Semaphore struct {
	hd lease.Handle
	p  kind.Semaphore
}

// maxPermits bounds a semaphore's size: Redis' scripts count permits in
// Lua numbers (doubles), exact only up to 2^53, and a sum of permits held
// and asked for reaches twice the size.
const maxPermits = 1 << 52

// Semaphore returns a handle on the semaphore name; permits is the size a
// semaphore that does not exist yet gets (see Semaphore). A bad name or a
// number below one or above 2^52 is reported (ErrInvalidArgument) by every
// call. Each call returns a new handle (not a lookup): a permit is the
// Permit that Acquire returned, whichever handle acquired it. Safe for
// concurrent use.
func (c *Client) Semaphore(name string, permits int) *Semaphore {
	s := &Semaphore{}
	if permits <= 0 || int64(permits) > maxPermits {
		s.hd.InitInvalid(c.e, name, fmt.Errorf("%w: semaphore %q needs from one to 2^52 permits, got %d", ErrInvalidArgument, name, permits))
		return s
	}
	s.hd.Init(c.e, name, &s.p)
	if s.hd.NameErr() == nil {
		s.p.Init(c.e, name, permits)
	}
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.hd.Name() }

// Permits returns the handle's number of permits: the one it was made
// with, or the last SetPermits through it. The size in Redis may differ
// (see Semaphore and Available).
func (s *Semaphore) Permits() int { return s.p.Size() }

// Acquire takes a permit, waiting up to wait for one: it is AcquireN with
// n = 1.
func (s *Semaphore) Acquire(ctx context.Context, wait, lease time.Duration) (*Permit, error) {
	return s.AcquireN(ctx, 1, wait, lease)
}

// AcquireN takes n permits as one Permit, waiting up to wait for them: wait <=
// 0 makes one attempt. Waiters are served in arrival order: n permits that are
// free go to this call only when nobody who came before it still waits. lease
// > 0 makes the permit expire lease after the grant, never renewed; lease <= 0
// selects watchdog mode (the permit's TTL is the watchdog timeout, renewed
// every third of it until Release). Release gives all n back at once.
//
// It returns the permit, or an error: one wrapping ErrWaitTimeout when the
// permits did not come within the wait, ErrInvalidArgument for bad input
// (n < 1 or above the handle's Permits, without a network call; n above
// the size in Redis, also when SetPermits shrinks it below n while this
// call waits), ErrClosed, ErrUnavailable when Redis did not answer within
// the wait, or ctx's cause. The wait bounds the whole call, network time
// included, and AcquireN returns as soon as ctx is done; what it left in
// Redis (a queue entry, permits granted as it left) is undone in the
// background. Safe for concurrent use.
func (s *Semaphore) AcquireN(ctx context.Context, n int, wait, lease time.Duration) (*Permit, error) {
	if size := s.p.Size(); s.hd.NameErr() == nil && (n < 1 || n > size) {
		return nil, fmt.Errorf("%w: %d permits of semaphore %q, which has %d", ErrInvalidArgument, n, s.hd.Name(), size)
	}
	l, err := s.hd.Acquire(ctx, permitRequest(wait, lease, n))
	switch {
	case err != nil:
		return nil, err
	case l == nil:
		return nil, fmt.Errorf("%w: no %d permits of %q within %v", ErrWaitTimeout, n, s.hd.Name(), max(wait, 0))
	}
	return &Permit{l: l}, nil
}

// permitRequest is AcquireN's request (permits ignore WithMaxHold).
func permitRequest(wait, d time.Duration, n int) lease.Request {
	return lease.Request{Wait: wait, Lease: d, MaxHold: -1, Weight: n}
}

// SetPermits sets the semaphore's size to n while it is in use, and makes
// n the handle's Permits. Growing it grants at once, by event, the queued
// waiters that now fit (in arrival order). Shrinking it takes nothing from
// the holders: new permits wait until those held fall below the new size,
// and a waiter for more than n permits fails with ErrInvalidArgument. It
// returns ErrInvalidArgument for n < 1 or n > 2^52 (without a network
// call), ErrClosed,
// or ctx's cause once ctx is done (the change may then still happen).
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if err := s.hd.Check(ctx, 0); err != nil {
		return err
	}
	if n < 1 || int64(n) > maxPermits {
		return fmt.Errorf("%w: semaphore %q needs from one to 2^52 permits, got %d", ErrInvalidArgument, s.hd.Name(), n)
	}
	return s.p.SetPermits(ctx, n)
}

// Available returns the free permits: the size less the permits held,
// never below 0 (a shrunk semaphore may hold more than its size). A
// semaphore that does not exist has the handle's Permits free. The answer
// may be out of date as soon as it returns.
func (s *Semaphore) Available(ctx context.Context) (int, error) {
	if err := s.hd.Check(ctx, 0); err != nil {
		return 0, err
	}
	return s.p.Available(ctx)
}
