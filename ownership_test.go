package dlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// One handle shared by many goroutines, as a sync.Mutex in a struct field
// is: never two of them inside at once.
func TestSharedHandleExcludes(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	stock := c.Mutex("shared:stock")
	var inside, overlaps, entries atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := stock.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				entries.Add(1)
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				if err := stock.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 || entries.Load() != 160 {
		t.Fatalf("%d overlaps in %d entries through one shared handle", overlaps.Load(), entries.Load())
	}
	// TryLock without a wait does not wait for another goroutine's hold of
	// the handle either.
	hctx := lockCtx(t, stock)
	done := make(chan bool)
	go func() {
		ok, err := stock.TryLock(ctx, 0, 0)
		done <- ok || err != nil
	}()
	if <-done {
		t.Fatal("a second goroutine got into a held shared handle")
	}
	if err := stock.Unlock(hctx); err != nil {
		t.Fatal(err)
	}
}

// Re-entry follows the call chain: WithLock inside WithLock's fn re-enters
// (the count goes to 2), and the loss of the outer hold cancels the inner
// context too.
func TestNestedWithLockReenters(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	err := c.WithLock(ctx, "nested", func(outer context.Context) error {
		tok := TokenFrom(outer)
		err := c.WithLock(outer, "nested", func(inner context.Context) error {
			fields, err := rdb.HGetAll(ctx, "nested").Result()
			if err != nil {
				return err
			}
			if len(fields) != 1 {
				return errors.New("nested WithLock made a second owner")
			}
			for _, n := range fields {
				if n != "2" {
					return errors.New("nested WithLock did not count to 2: " + n)
				}
			}
			if TokenFrom(inner) != tok {
				return errors.New("the re-entry changed the token")
			}
			// The outer hold is lost (taken by force): the inner context
			// ends with a cause saying so.
			if ok, err := c.Mutex("nested").ForceUnlock(ctx); !ok || err != nil {
				return errors.Join(errors.New("force unlock"), err)
			}
			select {
			case <-inner.Done():
			case <-ctx.Done():
				return errors.New("the inner context outlived the outer hold")
			}
			if !errors.Is(context.Cause(inner), ErrForced) || !errors.Is(context.Cause(inner), ErrLockLost) {
				return errors.Join(errors.New("inner cause"), context.Cause(inner))
			}
			return nil
		})
		// fn returned nil, so WithLock reports the loss.
		if !errors.Is(err, ErrForced) {
			return errors.Join(errors.New("inner WithLock after the loss"), err)
		}
		return nil
	})
	if !errors.Is(err, ErrForced) {
		t.Fatalf("outer WithLock after the loss = %v, want ErrForced", err)
	}
	// A Lock on another handle with a context that carries the hold counts
	// on that hold; Unlock with it counts down.
	m := c.Mutex("nested:handles")
	hctx := lockCtx(t, m)
	if err := c.Mutex("nested:handles").Lock(hctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := m.HoldCount(ctx); n != 2 {
		t.Fatalf("HoldCount after a re-entry through another handle = %d", n)
	}
	if err := c.Mutex("nested:handles").Unlock(hctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(hctx); err != nil {
		t.Fatal(err)
	}
	if l, _ := m.IsLocked(ctx); l {
		t.Fatal("still locked after both counts were released")
	}
	// Mixing kinds on one name through the context is refused.
	wctx, err := c.RWMutex("nested:kinds").WriteContext(ctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Mutex("nested:kinds").Lock(wctx); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a Mutex call under an RWMutex hold of the name = %v, want ErrInvalidArgument", err)
	}
	if err := c.RWMutex("nested:kinds").Unlock(wctx); err != nil {
		t.Fatal(err)
	}
}

// defer m.Unlock(ctx) with a request context that has ended still releases
// the lock (detached), instead of leaving it held for a whole TTL.
func TestUnlockWithFinishedContextReleases(t *testing.T) {
	c := newClient(t, shared)
	m := c.Mutex("unlock:ended-ctx")
	reqCtx, cancel := context.WithCancel(context.Background())
	if err := m.Lock(reqCtx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := m.Unlock(reqCtx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Unlock with an ended context = %v", err)
	}
	ctx := ctxT(t)
	waitFor(t, "the detached release", func() bool { l, _ := m.IsLocked(ctx); return !l })
	// Redis shows the release as soon as the script ran; the detached call
	// closes Done when its reply is in, moments later.
	waitFor(t, "Done closed after the release", func() bool {
		select {
		case <-m.Done():
			return true
		default:
			return false
		}
	})
	if m.Err() != nil {
		t.Fatalf("Err after a clean release = %v", m.Err())
	}
}
