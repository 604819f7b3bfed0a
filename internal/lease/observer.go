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

// Acquisition is the engine's record of one attempt to take a lock,
// reported when it ends; dlock.Acquisition documents each field. The root
// package turns it into that public type field by field, on the stack.
type Acquisition struct {
	Kind     Kind
	Name     string
	Acquired bool
	TimedOut bool
	Err      error
	Waited   time.Duration
	Reentry  bool
	Backend  string
	Weight   int
}

// Release is the engine's record of one Unlock (dlock.Release).
type Release struct {
	Kind   Kind
	Name   string
	Final  bool
	Held   time.Duration
	Err    error
	Weight int
}

// Observer is how the engine reports to one observer. The root package
// adapts each dlock.Observer to it (and to LongHoldObserver and
// LatchObserver); its methods have dlock.Observer's contract. A report is
// in two steps, so that the adapter converts the outcome without a closure
// per call: AcquireStarted returns what AcquireDone is given back with the
// outcome (nil: nothing more to report), and so for releases.
type Observer interface {
	AcquireStarted(ctx context.Context, kind Kind, name string) (started any)
	AcquireDone(started any, a Acquisition)
	ReleaseStarted(ctx context.Context, kind Kind, name string) (started any)
	ReleaseDone(started any, r Release)
	Lost(kind Kind, name string, cause error)
	Renewed(n int, err error)
	FellBack(kind Kind, name, backend string, reason error)
	BreakerChanged(state string)
}

// LongHoldObserver is an Observer that hears of long holds
// (dlock.LongHoldObserver).
type LongHoldObserver interface {
	HeldLong(kind Kind, name string, held time.Duration)
}

// LatchObserver is an Observer that hears of count-down latches
// (dlock.LatchObserver).
type LatchObserver interface {
	CountedDown(name string, err error)
	LatchWaited(name string, waited time.Duration, err error)
}

// started is one observer's report in progress.
type started struct {
	o Observer
	s any
}

// ObserveAcquire starts the report of an acquisition to the observers and
// returns the function that finishes it (nil without observers).
func ObserveAcquire(obs []Observer, ctx context.Context, kind Kind, name string) func(Acquisition) {
	var ss []started
	for _, o := range obs {
		if s := o.AcquireStarted(ctx, kind, name); s != nil {
			ss = append(ss, started{o, s})
		}
	}
	if len(ss) == 0 {
		return nil
	}
	return func(a Acquisition) {
		for _, x := range ss {
			x.o.AcquireDone(x.s, a)
		}
	}
}

// ObserveRelease starts the report of a release to the observers and
// returns the function that finishes it (a no-op without observers).
func ObserveRelease(obs []Observer, ctx context.Context, kind Kind, name string) func(Release) {
	var ss []started
	for _, o := range obs {
		if s := o.ReleaseStarted(ctx, kind, name); s != nil {
			ss = append(ss, started{o, s})
		}
	}
	return func(r Release) {
		for _, x := range ss {
			x.o.ReleaseDone(x.s, r)
		}
	}
}
