package lease

import (
	"context"
	"time"
)

// Kind names a lock type in observations.
type Kind string

// Lock kinds reported to an Observer.
const (
	KindMutex Kind = "mutex"
	KindFair  Kind = "fair"  // FairMutex
	KindRead  Kind = "read"  // RWMutex, read side
	KindWrite Kind = "write" // RWMutex, write side
	KindMulti Kind = "multi" // MultiLock, as a whole (members report their own)
	// KindSemaphore is a Semaphore's permit.
	KindSemaphore Kind = "semaphore"
)

// Families of kinds: a context carries at most one lease per family and
// name, and a call re-enters the lease of its own family.
const (
	familyMutex = iota // Mutex and FairMutex
	familyRead
	familyWrite
	familyOther
	kinds
)

func (k Kind) family() int {
	switch k {
	case KindMutex, KindFair:
		return familyMutex
	case KindRead:
		return familyRead
	case KindWrite:
		return familyWrite
	}
	return familyOther
}

// Acquisition describes one attempt to take a lock, reported when it ends.
type Acquisition struct {
	Kind     Kind
	Name     string
	Acquired bool // the lock was granted
	TimedOut bool // the wait ran out (not an error)
	// Acquired false, TimedOut false and Err nil: the lock was taken and the
	// caller did not wait (TryLock with wait <= 0).
	Err     error         // infrastructure failure or cancelled context
	Waited  time.Duration // from the call to its outcome
	Reentry bool          // a re-entry of a lock the handle already held
	Backend string        // the tier asked: BackendRedis, or a Fallback's Backend
	// Weight is the units asked for: a semaphore's permits (AcquireN's
	// n), 1 for every other kind.
	Weight int
}

// Release describes one Unlock, reported when it ends.
type Release struct {
	Kind  Kind
	Name  string
	Final bool          // the hold count reached zero: the lock was released
	Held  time.Duration // for a final release, how long the lock was held
	Err   error         // the release failed, or the hold had been lost
	// Weight is the units the hold took: a semaphore permit's permits, 1
	// for every other kind.
	Weight int
}

// Observer is told what a Client's locks do. dlockprom implements it for
// Prometheus. Methods are called synchronously from lock operations and the
// watchdog, possibly concurrently: they must be safe for concurrent use and
// must not block or call back into the Client. Embed NopObserver to stay
// compatible when methods are added.
type Observer interface {
	// AcquireStarted is called when an acquisition begins. The returned
	// function, if not nil, is called exactly once with the outcome; ctx is
	// the caller's, for tracing.
	AcquireStarted(ctx context.Context, kind Kind, name string) func(Acquisition)
	// ReleaseStarted is called when an Unlock begins. The returned function,
	// if not nil, is called exactly once with the outcome; an Unlock that
	// released nothing (ErrNotHeld, ErrClosed) reports Final false and its
	// error.
	ReleaseStarted(ctx context.Context, kind Kind, name string) func(Release)
	// Lost is called when a hold ends without Unlock.
	Lost(kind Kind, name string, cause error)
	// Renewed is called after each watchdog call, with the number of locks
	// it carried and its error.
	Renewed(n int, err error)
	// FellBack is called when WithLock turns to the Fallback tier, with the
	// Redis failure that made it (see WithFallback).
	FellBack(kind Kind, name, backend string, reason error)
	// BreakerChanged is called when the default circuit breaker of
	// WithFallback changes state: "closed", "open" or "half-open".
	BreakerChanged(state string)
}

// LongHoldObserver is an Observer that also hears of holds renewed past
// the Client's long-hold threshold (dlock.WithLongHoldAlert): HeldLong is
// called once per such hold, from the watchdog, with how long it has been
// held. It must not block.
type LongHoldObserver interface {
	HeldLong(kind Kind, name string, held time.Duration)
}

// LatchObserver is an Observer that also hears what count-down latches
// do: CountedDown(name, err) after each CountDown (err nil: Redis applied
// it), LatchWaited(name, waited, err) when a Wait returns (err nil: the
// latch is open), with how long it waited. Both are called only for calls
// that passed their argument checks. They must not block.
type LatchObserver interface {
	CountedDown(name string, err error)
	LatchWaited(name string, waited time.Duration, err error)
}

// NopObserver implements Observer doing nothing; embed it.
type NopObserver struct{}

// AcquireStarted implements Observer.
func (NopObserver) AcquireStarted(context.Context, Kind, string) func(Acquisition) { return nil }

// ReleaseStarted implements Observer.
func (NopObserver) ReleaseStarted(context.Context, Kind, string) func(Release) { return nil }

// Lost implements Observer.
func (NopObserver) Lost(Kind, string, error) {}

// Renewed implements Observer.
func (NopObserver) Renewed(int, error) {}

// FellBack implements Observer.
func (NopObserver) FellBack(Kind, string, string, error) {}

// BreakerChanged implements Observer.
func (NopObserver) BreakerChanged(string) {}

// ObserveAcquire starts the report of an acquisition to the observers and
// returns the function that finishes it (nil without observers).
func ObserveAcquire(obs []Observer, ctx context.Context, kind Kind, name string) func(Acquisition) {
	var fs []func(Acquisition)
	for _, o := range obs {
		if f := o.AcquireStarted(ctx, kind, name); f != nil {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return func(a Acquisition) {
		for _, f := range fs {
			f(a)
		}
	}
}

// ObserveRelease starts the report of a release to the observers and
// returns the function that finishes it (a no-op without observers).
func ObserveRelease(obs []Observer, ctx context.Context, kind Kind, name string) func(Release) {
	var fs []func(Release)
	for _, o := range obs {
		if f := o.ReleaseStarted(ctx, kind, name); f != nil {
			fs = append(fs, f)
		}
	}
	return func(r Release) {
		for _, f := range fs {
			f(r)
		}
	}
}
