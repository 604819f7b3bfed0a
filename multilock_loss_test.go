package dlock

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// collect runs the collector a few times, time for weak pointers to
// clear and cleanups to run.
func collect() {
	for range 10 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}

// A holder whose fixed lease ran out, and who looked its handle up by name
// (Redisson's habit), owes an Unlock with the context it locked with. When
// the registry lets the handle go meanwhile, the owed Unlock must still not
// release the hold another goroutine of the Client took through a new
// handle of the same name.
func TestOwedUnlockSurvivesHandleCollection(t *testing.T) {
	ctx := ctxT(t)
	c, other := newClient(t, shared), newClient(t, shared)
	const name = "ml:owed-gc"
	lctx := context.WithValue(ctx, ctxName("holder"), 1)
	if ok, err := c.Mutex(name).TryLock(lctx, time.Second, 100*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	waitGone(t, c, name, 5*time.Second)
	collect() // nothing of the caller's refers to the handle now
	// Another goroutine of the Client takes the name.
	if ok, err := c.Mutex(name).TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// The lost holder's late Unlock.
	err := c.Mutex(name).Unlock(lctx)
	if ok, _ := other.Mutex(name).TryLock(ctx, 0, 0); ok {
		t.Errorf("another Client took the lock while the second holder held it (the lost holder's Unlock answered %v)", err)
		_ = other.Mutex(name).Unlock(ctx)
	}
	if !errors.Is(err, ErrLockLost) {
		t.Errorf("the lost holder's Unlock answered %v, want ErrLockLost", err)
	}
	_ = c.Mutex(name).Unlock(ctx)
}

// MultiLock.Lock (and TryLock), which return no context, must not report
// every member taken when one taken before the last was lost meanwhile:
// the caller would work beside the member's new holder.
func TestMultiLockLockDoesNotReturnALostMember(t *testing.T) {
	ctx := ctxT(t)
	c, other := newClient(t, shared), newClient(t, shared)
	a, b := "ml:multi-lost:a", "ml:multi-lost:b"
	for _, try := range []bool{false, true} {
		if err := other.Mutex(b).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		ml := c.MultiLock(c.Mutex(a), c.Mutex(b))
		got := make(chan error, 1)
		go func() {
			if try {
				ok, err := ml.TryLock(ctx, 10*time.Second, 0)
				if !ok && err == nil {
					err = ErrWaitTimeout
				}
				got <- err
				return
			}
			got <- ml.Lock(ctx)
		}()
		waitFor(t, "a taken by the MultiLock", func() bool { return c.Mutex(a).Token() != 0 })
		if held, err := other.Mutex(a).ForceUnlock(ctx); !held || err != nil {
			t.Fatal(held, err)
		}
		waitFor(t, "a's loss told", func() bool { return c.Mutex(a).Err() != nil })
		if ok, err := other.Mutex(a).TryLock(ctx, time.Second, 0); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if err := other.Mutex(b).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		err := <-got
		if err == nil {
			t.Errorf("try=%v: the MultiLock answered every member taken while another Client holds %s", try, a)
			_ = ml.Unlock(ctx)
		} else if le := (*LossError)(nil); !errors.Is(err, ErrLockLost) || !errors.As(err, &le) {
			t.Errorf("try=%v: %v, want a *LossError", try, err)
		}
		if err := other.Mutex(a).Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		waitGone(t, c, b, 5*time.Second)
	}
}

// Two members of one MultiLock that are one Redis key (a namespaced
// Client's "x" and a plain Client's "ns:x") are a member taken twice: the
// second waits for the first for good.
func TestMultiLockSameKeyTwice(t *testing.T) {
	ctx := ctxT(t)
	plain := newClient(t, shared)
	spaced := newClient(t, shared, WithNamespace("loss-ns"))
	ml := plain.MultiLock(spaced.Mutex("samekey"), plain.Mutex("loss-ns:samekey"))
	ok, err := ml.TryLock(ctx, 300*time.Millisecond, 0)
	if ok {
		_ = ml.Unlock(ctx)
	}
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("TryLock of one key twice: %v, %v; want ErrInvalidArgument", ok, err)
	}
}
