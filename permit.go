package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// Permit is one permit of a Semaphore, or n of them (AcquireN), held from
// the acquisition until Release or its loss. Like a lock's hold it is leased: renewed by the Client's
// watchdog when acquired with lease <= 0, fixed otherwise, and it ends with
// its holder (a crashed or cut-off holder's permit returns to the semaphore
// when its TTL runs out). Done and Err tell the holder that its permit ended
// without Release, by the same rules as a lock's loss (see the package
// doc): Done closes before the permit's TTL runs out after its last
// confirmed renewal.
//
// A Permit is safe for concurrent use; Release takes effect once. A nil
// *Permit, which Acquire returns with its error, holds nothing: its Release
// and Extend return ErrNotHeld, its Done is closed and its Err is
// ErrNotHeld, so that a deferred Release of a failed Acquire does no harm.
type Permit struct {
	l *lease.Lease
}

// ID returns the permit's id as the semaphore's sorted set has it:
// "<client id>:<n>", followed by "#<k>" for a permit of k > 1 permits ("" for
// a nil Permit).
func (p *Permit) ID() string {
	if p == nil {
		return ""
	}
	return p.l.Field()
}

// N returns the number of permits the Permit holds (AcquireN's n; 0 for a
// nil Permit).
func (p *Permit) N() int {
	if p == nil {
		return 0
	}
	return p.l.Weight()
}

// Done returns a channel that is closed when the permit ends: by Release, or
// by its loss (see Err).
func (p *Permit) Done() <-chan struct{} {
	if p == nil {
		return closedChan
	}
	return p.l.Done()
}

// closedChan is a nil Permit's Done.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Err returns why the permit ended without Release (a *LossError wrapping
// ErrLockLost and the reason: ErrUnconfirmed, ErrTakenOver, ErrRenewRefused,
// ErrClosed or ErrLeaseEnded), or nil while it is held and after Release.
func (p *Permit) Err() error {
	if p == nil {
		return ErrNotHeld
	}
	return publicErr(p.l.Err())
}

// Release gives the permit back, all its permits at once; the queued
// waiters that now fit get them at once.
// The release is sent even when ctx is already done (detached, bounded by
// the cleanup timeout): Release then returns at once with an error wrapping
// ctx's cause while the release goes on. It returns ErrNotHeld when the
// permit was already released, and an error wrapping ErrLockLost when the
// permit had been lost (the work it guarded may have overlapped another
// holder's). Safe for concurrent use: the first call releases.
func (p *Permit) Release(ctx context.Context) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case p == nil:
		return ErrNotHeld
	}
	return p.l.Release(ctx, true)
}

// Extend gives a permit acquired with a fixed lease lease from now; its
// loss deadline moves with it. It returns ErrInvalidArgument for lease <= 0
// and for a permit renewed by the watchdog, ErrNotHeld or an error wrapping
// ErrLockLost once the permit has ended, and ctx's cause once ctx is done.
// As Mutex.Extend, it never shortens the permit's expiry in Redis. Safe
// for concurrent use.
func (p *Permit) Extend(ctx context.Context, lease time.Duration) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case lease <= 0:
		return fmt.Errorf("%w: Extend needs a lease > 0, got %v", ErrInvalidArgument, lease)
	case p == nil:
		return ErrNotHeld
	}
	return p.l.Extend(ctx, lease)
}
