package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
)

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
	hd lease.Handle
	p  kind.Semaphore
	n  int
}

// Semaphore returns a handle on the semaphore name of permits permits. A bad
// name or a number below one is reported (ErrInvalidArgument) by Acquire.
func (c *Client) Semaphore(name string, permits int) *Semaphore {
	s := &Semaphore{n: permits}
	if permits <= 0 {
		s.hd.InitInvalid(c.e, name, fmt.Errorf("%w: semaphore %q needs at least one permit, got %d", ErrInvalidArgument, name, permits))
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
	l, err := s.hd.Acquire(ctx, permitRequest(wait, lease))
	switch {
	case err != nil:
		return nil, err
	case l == nil:
		return nil, fmt.Errorf("%w: no permit of %q within %v", ErrWaitTimeout, s.hd.Name(), max(wait, 0))
	}
	return &Permit{l: l}, nil
}

// permitRequest is Acquire's request: permits are not bounded by
// WithMaxHold.
func permitRequest(wait, d time.Duration) lease.Request {
	return lease.Request{Wait: wait, Lease: d, MaxHold: -1}
}
