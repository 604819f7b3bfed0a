package dlock

import (
	"context"
	"time"
)

// Locker is what every dlock lock offers: *Mutex, *FairMutex, *RWMutex (its
// write side), RWMutex.RLocker() (its read side) and *MultiLock. All but
// MultiLock also have Name, by which a MultiLock orders its members. The methods
// mean what they mean on Mutex: wait <= 0 is one attempt, lease <= 0 is
// watchdog mode, (false, nil) is a wait that ran out.
type Locker interface {
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

var (
	_ Locker = (*Mutex)(nil)
	_ Locker = (*FairMutex)(nil)
)
