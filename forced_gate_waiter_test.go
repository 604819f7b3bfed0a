package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A holds with a fixed lease and never unlocks; B, another goroutine of
// the Client, waits at the handle's gate. An operator's ForceUnlock takes
// A's hold away before its lease ends: A is told (ErrForced), Redis holds
// nothing, and B is let in at once, as when A's lease runs out. With only
// a lease's end letting B in (edeea66), B waited until its own ctx ended.
func TestForcedHoldLetsTheGateWaiterIn(t *testing.T) {
	r := testenvRedis(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r)
	other := newClient(t, r)
	tctx := ctxT(t)
	const name = "gatewaiter:forced"
	const lease = time.Second
	m := c.Mutex(name)
	a := context.WithValue(tctx, workerKey{}, "A")
	if ok, err := m.TryLock(a, 0, lease); !ok || err != nil {
		t.Fatalf("A's TryLock: %v %v", ok, err)
	}
	locked := time.Now()
	doneA := m.Done() // A's lease's
	b := context.WithValue(tctx, workerKey{}, "B")
	bctx, cancel := context.WithTimeout(b, 4*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- m.Lock(bctx) }()
	time.Sleep(100 * time.Millisecond) // B at the gate

	if ok, err := other.Mutex(name).ForceUnlock(tctx); !ok || err != nil {
		t.Fatalf("ForceUnlock: %v %v", ok, err)
	}
	select {
	case <-doneA:
	case <-time.After(time.Second):
		t.Fatal("A was not told of the force")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("B's Lock: %v after %v (the lock was free in Redis from %v: exists=%d)",
				err, time.Since(locked).Round(time.Millisecond), 100*time.Millisecond, rdb.Exists(tctx, name).Val())
		}
		t.Logf("B got the lock %v after A's lock", time.Since(locked).Round(time.Millisecond))
		_ = m.Unlock(b)
	case <-time.After(lease + time.Second):
		t.Errorf("B still waits at the gate %v after A's lock (lease %v), the key exists=%d in Redis",
			time.Since(locked).Round(time.Millisecond), lease, rdb.Exists(tctx, name).Val())
		t.Logf("B's Lock finally: %v", <-got)
	}
	if err := m.Unlock(a); !errors.Is(err, ErrForced) {
		t.Errorf("A's late Unlock: %v, want its loss, ErrForced", err)
	}
}
