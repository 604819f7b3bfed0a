package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// workerKey marks a worker's own context (one per worker, as a request's).
type workerKey struct{}

// A worker locks and unlocks with its own ctx (no hold context). Its hold
// is lost (a fixed lease ends while it works), and its Unlock is on its way
// to Redis when another goroutine's lock call drops the lost hold and keeps
// the worker's Unlocks owed (dropLost, owe). That Unlock took the lease
// already: nothing is owed. Before, the owed entry stayed for a watchdog
// timeout, so the worker's next Unlock with the same ctx answered the old
// loss, its new hold stayed in Redis, renewed, and its next Lock waited
// behind it.
func TestUnlockInFlightIsNotOwedAgain(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	c := newClient(t, r)
	other := newClient(t, r)
	ctx := ctxT(t)
	const name = "owed:in-flight"
	m := c.Mutex(name)
	worker := context.WithValue(ctx, workerKey{}, 1)

	if ok, err := m.TryLock(worker, 0, 150*time.Millisecond); !ok || err != nil {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	waitFor(t, "the fixed lease's end", func() bool { return m.Err() != nil })

	// Keep the worker's Unlock in flight for a moment (one slow round trip).
	if err := rdb.ClientPause(ctx, 500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	unlocked := make(chan error, 1)
	go func() { unlocked <- m.Unlock(worker) }()
	time.Sleep(100 * time.Millisecond)
	// Another goroutine of the Client tries the name meanwhile.
	if ok, err := m.TryLock(context.Background(), 0, 0); ok || err != nil {
		t.Fatalf("TryLock beside the lost hold: %v %v", ok, err)
	}
	if err := <-unlocked; !errors.Is(err, ErrLockLost) {
		t.Fatalf("the lost holder's Unlock: %v, want its loss", err)
	}

	// The worker's next round, same ctx.
	if err := m.Lock(worker); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(worker); err != nil {
		t.Errorf("the worker's Unlock of its new, live hold answered %v (want nil)", err)
	}
	if n := rdb.Exists(ctx, name).Val(); n != 0 {
		t.Errorf("the lock is still held in Redis after its only holder's Unlock (fields %v)", rdb.HGetAll(ctx, name).Val())
	}
	time.Sleep(200 * time.Millisecond)
	if ok, _ := other.Mutex(name).TryLock(ctx, 0, 0); !ok {
		t.Errorf("another Client cannot take the lock nobody holds any more")
	} else {
		_ = other.Mutex(name).Unlock(ctx)
	}
	// The worker's next Lock with its ctx waits behind its own stranded hold.
	lctx, cancel := context.WithTimeout(worker, time.Second)
	defer cancel()
	if err := m.Lock(lctx); err != nil {
		t.Errorf("the worker's next Lock: %v", err)
	} else {
		_ = m.Unlock(worker)
	}
}

// A worker's fixed lease ends while it works, and another goroutine of the
// Client takes the name, so the worker's Unlock is owed its loss. Extend
// and HoldCount with the worker's ctx look at the lost hold; they do not pay
// that Unlock. Before, they did: the worker's Unlock then released the
// other goroutine's live hold and answered nil, and another Client took
// the lock beside that goroutine, which was never told.
func TestExtendAndHoldCountDoNotSpendAnOwedUnlock(t *testing.T) {
	for _, call := range []string{"Extend", "HoldCount"} {
		t.Run(call, func(t *testing.T) {
			r := testenvRedis(t)
			rdb := r.NewClient(t)
			c := newClient(t, r)
			other := newClient(t, r)
			ctx := ctxT(t)
			name := "owed:spent:" + call
			m := c.Mutex(name)
			worker := context.WithValue(ctx, workerKey{}, 1)
			if ok, err := m.TryLock(worker, 0, 100*time.Millisecond); !ok || err != nil {
				t.Fatalf("TryLock: %v %v", ok, err)
			}
			waitFor(t, "the fixed lease's end", func() bool { return m.Err() != nil })
			// Another goroutine of the Client, with its own ctx, takes the name.
			g := context.WithValue(ctx, workerKey{}, 2)
			if err := m.Lock(g); err != nil {
				t.Fatal(err)
			}
			gField := holderField(m)
			// The worker, still working, asks for more time (or its count).
			switch call {
			case "Extend":
				err := m.Extend(worker, time.Second)
				t.Logf("worker's Extend: %v", err)
			case "HoldCount":
				n, err := m.HoldCount(worker)
				t.Logf("worker's HoldCount: %d, %v", n, err)
			}
			// ... and unlocks with its ctx.
			err := m.Unlock(worker)
			if !errors.Is(err, ErrLockLost) {
				t.Errorf("the lost worker's Unlock answered %v, want its loss", err)
			}
			if !rdb.HExists(ctx, name, gField).Val() {
				t.Errorf("the other goroutine's live hold (%s) was released by the lost worker's Unlock; its Err() = %v", gField, m.Err())
			}
			if ok, _ := other.Mutex(name).TryLock(ctx, 0, 0); ok {
				t.Errorf("another Client took the lock while the goroutine holds it, untold (Err() = %v)", m.Err())
				_ = other.Mutex(name).Unlock(ctx)
			}
			_ = m.Unlock(g)
		})
	}
}
