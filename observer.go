package dlock

import "github.com/dlock-dev/dlock/internal/lease"

// Kind names a lock type in observations.
type Kind = lease.Kind

// Lock kinds reported to an Observer.
const (
	KindMutex     = lease.KindMutex
	KindFair      = lease.KindFair      // FairMutex
	KindRead      = lease.KindRead      // RWMutex, read side
	KindWrite     = lease.KindWrite     // RWMutex, write side
	KindMulti     = lease.KindMulti     // MultiLock, as a whole (members report their own)
	KindSemaphore = lease.KindSemaphore // a Semaphore's permit
)

// Acquisition describes one attempt to take a lock or permit, reported when
// it ends: Kind, Name, Acquired, TimedOut (the wait ran out; not an error),
// Err (an infrastructure failure or a cancelled context), Waited, Reentry,
// Backend (BackendRedis, or a Fallback's) and Weight (AcquireN's n; 1 for
// other kinds). Acquired false, TimedOut false and Err nil: the lock was
// taken and the caller did not wait.
type Acquisition = lease.Acquisition

// Release describes one Unlock, reported when it ends: Kind, Name, Final
// (the hold count reached zero), Held (for a final release, how long the
// lock was held), Err and Weight (a permit's permits; 1 for other kinds).
type Release = lease.Release

// Observer is told what a Client's locks do. dlockprom implements it for
// Prometheus. Methods are called synchronously from lock operations and the
// watchdog, possibly concurrently: they must be safe for concurrent use and
// must not block or call back into the Client. Embed NopObserver to stay
// compatible when methods are added. The methods:
//
//   - AcquireStarted(ctx, kind, name) func(Acquisition): an acquisition
//     begins; the returned function, if not nil, is called exactly once
//     with the outcome. ctx is the caller's, for tracing.
//   - ReleaseStarted(ctx, kind, name) func(Release): an Unlock begins; an
//     Unlock that released nothing reports Final false and its error.
//   - Lost(kind, name, cause): a hold ended without Unlock.
//   - Renewed(n, err): after each watchdog call, with the number of locks
//     it carried and its error.
//   - FellBack(kind, name, backend, reason): WithLock turned to the
//     Fallback tier, with the Redis failure that made it.
//   - BreakerChanged(state): the default circuit breaker of WithFallback
//     changed state: "closed", "open" or "half-open".
type Observer = lease.Observer

// LongHoldObserver is an Observer that also hears of holds renewed past
// WithLongHoldAlert: HeldLong(kind, name, held) is called once per such
// hold, from the watchdog. It must not block.
type LongHoldObserver = lease.LongHoldObserver

// LatchObserver is an Observer that also hears of CountDownLatch calls:
// CountedDown(name, err) after each CountDown, LatchWaited(name, waited,
// err) when a Wait returns (err nil: the latch opened). Must not block.
type LatchObserver = lease.LatchObserver

// NopObserver implements Observer doing nothing; embed it.
type NopObserver = lease.NopObserver
