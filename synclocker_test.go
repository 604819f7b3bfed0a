package dlock

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Many goroutines behind SyncLockers of one Mutex (and of a second Client)
// never overlap; an Unlock without a hold is reported to the callback.
func TestSyncLockerExcludes(t *testing.T) {
	c1, c2 := newClient(t, shared), newClient(t, shared)
	var reported []error
	var mu sync.Mutex
	report := func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }
	lockers := []sync.Locker{SyncLocker(c1.Mutex("sync:x"), report), SyncLocker(c2.Mutex("sync:x"), report)}
	var inside, overlaps, total atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		l := lockers[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				l.Lock()
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				total.Add(1)
				inside.Add(-1)
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 || total.Load() != 160 {
		t.Fatalf("%d overlaps in %d holds", overlaps.Load(), total.Load())
	}
	if len(reported) != 0 {
		t.Fatalf("errors reported: %v", reported)
	}
	lockers[0].Unlock() // not held
	if len(reported) != 1 || !errors.Is(reported[0], ErrNotHeld) {
		t.Fatalf("Unlock of nothing reported %v, want ErrNotHeld", reported)
	}
}

// Lock keeps trying through an outage, reporting each failure, and returns
// holding the lock once Redis is back.
func TestSyncLockerRetriesThroughOutage(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	errs := make(chan error, 100)
	l := SyncLocker(c.Mutex("sync:outage"), func(err error) {
		select {
		case errs <- err:
		default:
		}
	})
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	locked := make(chan struct{})
	go func() { l.Lock(); close(locked) }()
	select {
	case err := <-errs:
		t.Logf("reported while Redis is down: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no error reported while Redis was down")
	}
	select {
	case <-locked:
		t.Fatal("Lock returned while Redis was down")
	default:
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-locked:
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not acquire after Redis came back")
	}
	if held, err := c.Mutex("sync:outage").IsLocked(ctxT(t)); err != nil || !held {
		t.Fatalf("IsLocked = %v, %v after Lock returned", held, err)
	}
	l.Unlock()
}

// A nil Locker is an invalid argument, not a panic: Lock reports
// ErrInvalidArgument (and blocks for good, as with an invalid name: the
// test's onError ends its goroutine), and Unlock reports it.
func TestSyncLockerOfNilReportsInsteadOfPanicking(t *testing.T) {
	for _, l := range []Locker{nil, (*Mutex)(nil)} {
		errs := make(chan error, 1)
		locking := SyncLocker(l, func(err error) {
			errs <- err
			runtime.Goexit() // the Lock never returns
		})
		go locking.Lock()
		if err := <-errs; !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Lock of SyncLocker(%T): %v, want ErrInvalidArgument", l, err)
		}
		SyncLocker(l, func(err error) { errs <- err }).Unlock()
		if err := <-errs; !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Unlock of SyncLocker(%T): %v, want ErrInvalidArgument", l, err)
		}
	}
}

// Readers behind one SyncLocker of an RLocker share the lock, and each
// Unlock releases one of their read holds: the holds were taken with
// context.Background(), and Unlock, bounded by the cleanup timeout, still
// stands for that caller (with a context of its own it matched none of
// them and, with several, released nothing: ErrAmbiguous, the holds
// renewed until Close).
func TestSyncLockerReadersUnlock(t *testing.T) {
	c := newClient(t, shared)
	var mu sync.Mutex
	var reported []error
	l := SyncLocker(c.RWMutex("sync:readers").RLocker(), func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() })
	rdb := rdbFor(t, shared)
	l.Lock()
	l.Lock() // a second reader beside the first: the mode and two readers
	if n := rdb.HLen(ctxT(t), "sync:readers").Val(); n != 3 {
		t.Errorf("the lock holds %d fields, want the mode and two readers", n)
	}
	l.Unlock()
	l.Unlock()
	if len(reported) != 0 {
		t.Fatalf("Unlocks of the readers reported %v", reported)
	}
	if n := rdb.Exists(ctxT(t), "sync:readers").Val(); n != 0 {
		t.Fatal("the read holds are still in Redis after both Unlocks")
	}
}
