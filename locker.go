package dlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// Locker is what every dlock lock offers: *Mutex, *FairMutex, *RWMutex (its
// write side), RWMutex.RLocker() (its read side) and *MultiLock. The methods
// mean what they mean on Mutex: wait <= 0 is one attempt, lease <= 0 is
// watchdog mode, (false, nil) is a wait that ran out. Every Locker is safe
// for concurrent use.
type Locker interface {
	// TryLock tries to take the lock, waiting up to wait: (true, nil) once
	// held, (false, nil) when the wait ran out. See Mutex.TryLock.
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	// Lock takes the lock in watchdog mode, waiting until it is held or
	// ctx is done. See Mutex.Lock.
	Lock(ctx context.Context) error
	// Unlock releases one hold. See Mutex.Unlock.
	Unlock(ctx context.Context) error
}

// Member is a named lock a MultiLock can take: *Mutex, *FairMutex,
// *RWMutex (its write side) and RWMutex.RLocker() (its read side). Only dlock
// implements it. Every Member is safe for concurrent use.
type Member interface {
	Locker
	// Name returns the lock's name, without the Client's namespace.
	Name() string
	member() *lease.Handle
}

func (m *Mutex) member() *lease.Handle {
	if m == nil {
		return nil
	}
	return &m.hd
}

func (f *FairMutex) member() *lease.Handle {
	if f == nil {
		return nil
	}
	return &f.hd
}

func (rw *RWMutex) member() *lease.Handle {
	if rw == nil {
		return nil
	}
	return &rw.w
}

func (l *readLocker) member() *lease.Handle {
	if l == nil || l.rw == nil {
		return nil
	}
	return &l.rw.r
}

var (
	_ Member = (*Mutex)(nil)
	_ Member = (*FairMutex)(nil)
	_ Member = (*RWMutex)(nil)
	_ Member = (*readLocker)(nil)
	_ Locker = (*MultiLock)(nil)
)
