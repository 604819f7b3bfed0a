package dlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// Kind names a lock type in observations and in a FallbackRequest. A Kind
// is a string value; safe to copy and share.
type Kind string

// Lock kinds reported to an Observer.
const (
	KindMutex     Kind = "mutex"     // Mutex
	KindFair      Kind = "fair"      // FairMutex
	KindRead      Kind = "read"      // RWMutex, read side
	KindWrite     Kind = "write"     // RWMutex, write side
	KindMulti     Kind = "multi"     // MultiLock, as a whole (members report their own)
	KindSemaphore Kind = "semaphore" // a Semaphore's permit
)

// Acquisition describes one attempt to take a lock or permit, reported to
// an Observer when it ends. Acquired false, TimedOut false and Err nil: the
// lock was taken by another holder and the caller did not wait (TryLock
// with wait <= 0). An Acquisition is a value; safe to copy and share.
type Acquisition struct {
	// Kind is the kind of lock asked for.
	Kind Kind
	// Name is the lock's name (a MultiLock's: its members' names, sorted,
	// joined by ",").
	Name string
	// Acquired reports that the lock was granted (or re-entered).
	Acquired bool
	// TimedOut reports that the wait ran out: contention, not an error.
	TimedOut bool
	// Err is the failure: an infrastructure error, ErrUnavailable, a
	// cancelled context's cause, a loss found by a re-entry.
	Err error
	// Waited is the time from the call to its outcome.
	Waited time.Duration
	// Reentry reports a re-entry of a hold the context carried.
	Reentry bool
	// Backend is the tier asked: BackendRedis, or a Fallback's Backend.
	Backend string
	// Weight is the units asked for: AcquireN's n for a Semaphore, 1 for
	// every other kind.
	Weight int
}

// Release describes one Unlock (or a permit's Release), reported to an
// Observer when it ends. A Release is a value; safe to copy and share.
type Release struct {
	// Kind is the kind of lock released.
	Kind Kind
	// Name is the lock's name.
	Name string
	// Final reports that the hold count reached zero: the lock was
	// released (or handed on). An Unlock that released nothing (ErrNotHeld,
	// ErrAmbiguous, ErrClosed) reports false and its error.
	Final bool
	// Held is, for a final release, how long the lock was held.
	Held time.Duration
	// Err is the release's failure, or the loss of a hold that had been
	// lost (wrapping ErrLockLost).
	Err error
	// Weight is the units the hold took: a permit's permits, 1 for every
	// other kind.
	Weight int
}

// Observer is told what a Client's locks do. dlockprom implements it for
// Prometheus, dlockotel for OpenTelemetry. Methods are called synchronously
// from lock operations and the watchdog, possibly concurrently: they must
// be safe for concurrent use and must not block or call back into the
// Client. Embed NopObserver to stay compatible when methods are added.
type Observer interface {
	// AcquireStarted is called when an acquisition begins. The returned
	// function, if not nil, is called exactly once with the outcome; ctx
	// is the caller's, for tracing.
	AcquireStarted(ctx context.Context, kind Kind, name string) func(Acquisition)
	// ReleaseStarted is called when an Unlock begins. The returned
	// function, if not nil, is called exactly once with the outcome.
	ReleaseStarted(ctx context.Context, kind Kind, name string) func(Release)
	// Lost is called when a hold ends without Unlock, with the loss (a
	// *LossError).
	Lost(kind Kind, name string, cause error)
	// Renewed is called after each watchdog call, with the number of
	// locks it carried and its error.
	Renewed(n int, err error)
	// FellBack is called when WithLock turns to the Fallback tier, with
	// the Redis failure that made it (see WithFallback).
	FellBack(kind Kind, name, backend string, reason error)
	// BreakerChanged is called when the default circuit breaker of
	// WithFallback changes state: "closed", "open" or "half-open".
	BreakerChanged(state string)
}

// LongHoldObserver is an Observer that also hears of holds renewed past
// WithLongHoldAlert. Its methods have Observer's concurrency contract.
type LongHoldObserver interface {
	// HeldLong is called once per such hold, from the watchdog, with how
	// long it has been held. It must not block.
	HeldLong(kind Kind, name string, held time.Duration)
}

// LatchObserver is an Observer that also hears of CountDownLatch calls
// that passed their argument checks. Its methods have Observer's
// concurrency contract.
type LatchObserver interface {
	// CountedDown is called after each CountDown (err nil: Redis applied
	// it).
	CountedDown(name string, err error)
	// LatchWaited is called when a Wait returns (err nil: the latch
	// opened), with how long it waited.
	LatchWaited(name string, waited time.Duration, err error)
}

// NopObserver implements Observer doing nothing; embed it. It has no
// state: safe for concurrent use.
type NopObserver struct{}

// AcquireStarted implements Observer: it asks for no outcome.
func (NopObserver) AcquireStarted(context.Context, Kind, string) func(Acquisition) { return nil }

// ReleaseStarted implements Observer: it asks for no outcome.
func (NopObserver) ReleaseStarted(context.Context, Kind, string) func(Release) { return nil }

// Lost implements Observer.
func (NopObserver) Lost(Kind, string, error) {}

// Renewed implements Observer.
func (NopObserver) Renewed(int, error) {}

// FellBack implements Observer.
func (NopObserver) FellBack(Kind, string, string, error) {}

// BreakerChanged implements Observer.
func (NopObserver) BreakerChanged(string) {}

// observed is an Observer as the engine calls it: its records become the
// public types field by field, on the stack, and the outcome's function
// travels through the engine as the report's started value (a func is
// stored in an interface without allocating), so no report allocates more
// than the engine's own does.
type observed struct {
	o     Observer
	long  LongHoldObserver // o's, or nil
	latch LatchObserver    // o's, or nil
}

func observe(o Observer) lease.Observer {
	a := &observed{o: o}
	a.long, _ = o.(LongHoldObserver)
	a.latch, _ = o.(LatchObserver)
	return a
}

func (a *observed) AcquireStarted(ctx context.Context, k lease.Kind, name string) any {
	if f := a.o.AcquireStarted(ctx, Kind(k), name); f != nil {
		return f
	}
	return nil
}

func (a *observed) AcquireDone(started any, x lease.Acquisition) {
	started.(func(Acquisition))(Acquisition{Kind: Kind(x.Kind), Name: x.Name, Acquired: x.Acquired, TimedOut: x.TimedOut,
		Err: x.Err, Waited: x.Waited, Reentry: x.Reentry, Backend: x.Backend, Weight: x.Weight})
}

func (a *observed) ReleaseStarted(ctx context.Context, k lease.Kind, name string) any {
	if f := a.o.ReleaseStarted(ctx, Kind(k), name); f != nil {
		return f
	}
	return nil
}

func (a *observed) ReleaseDone(started any, x lease.Release) {
	started.(func(Release))(Release{Kind: Kind(x.Kind), Name: x.Name, Final: x.Final, Held: x.Held, Err: x.Err, Weight: x.Weight})
}

func (a *observed) Lost(k lease.Kind, name string, cause error) {
	a.o.Lost(Kind(k), name, publicErr(cause))
}

func (a *observed) Renewed(n int, err error) { a.o.Renewed(n, err) }

func (a *observed) FellBack(k lease.Kind, name, backend string, reason error) {
	a.o.FellBack(Kind(k), name, backend, reason)
}

func (a *observed) BreakerChanged(state string) { a.o.BreakerChanged(state) }

func (a *observed) HeldLong(k lease.Kind, name string, held time.Duration) {
	if a.long != nil {
		a.long.HeldLong(Kind(k), name, held)
	}
}

func (a *observed) CountedDown(name string, err error) {
	if a.latch != nil {
		a.latch.CountedDown(name, err)
	}
}

func (a *observed) LatchWaited(name string, waited time.Duration, err error) {
	if a.latch != nil {
		a.latch.LatchWaited(name, waited, err)
	}
}
