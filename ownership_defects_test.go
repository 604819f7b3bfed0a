package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Tests of issue 28: where a hold's identity, count or deadline could
// diverge between the process and Redis. Each failed on cf1ff77.

// waitDone waits for ctx to end, failing the test after within.
func waitDone(t *testing.T, ctx context.Context, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(within):
		t.Fatalf("%s did not end within %v", what, within)
	}
}

// waitGone waits until the key name no longer exists in Redis.
func waitGone(t *testing.T, c *Client, name string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		info, err := c.Inspect(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Locked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still locked after %v: %+v", name, within, info)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two downgrades under one write hold are two read holds: each has its own
// token and field, and releasing one (or the write hold) leaves the other
// excluding writers.
func TestDowngradesAreDistinctHolds(t *testing.T) {
	c, other := newClient(t, shared), newClient(t, shared)
	ctx := ctxT(t)
	const name = "own28:downgrades"
	rw := c.RWMutex(name)
	wctx, err := rw.WriteContext(ctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := rw.ReadContext(wctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.ReadContext(wctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if TokenFrom(r1) == TokenFrom(r2) {
		t.Errorf("two downgrades got one token %d", TokenFrom(r1))
	}
	if err := rw.RUnlock(r2); err != nil {
		t.Fatal(err)
	}
	if err := rw.Unlock(wctx); err != nil {
		t.Fatal(err)
	}
	if r1.Err() != nil {
		t.Fatalf("the remaining downgrade ended: %v", context.Cause(r1))
	}
	ok, err := other.RWMutex(name).TryLock(ctx, 0, 0)
	if ok || err != nil {
		t.Fatalf("a writer of another Client got in beside a live read hold: %v, %v", ok, err)
	}
	info, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode != "read" || len(info.Holders) != 1 {
		t.Fatalf("after one downgrade's release and the write release: %+v", info)
	}
	if err := rw.RUnlock(r1); err != nil {
		t.Fatal(err)
	}
}

// A short-lease downgrade does not end a sibling downgrade's share.
func TestShortDowngradeLeavesSiblingShare(t *testing.T) {
	c, other := newClient(t, shared), newClient(t, shared)
	ctx := ctxT(t)
	const name = "own28:shortdowngrade"
	rw := c.RWMutex(name)
	wctx, err := rw.WriteContext(ctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	short, err := rw.ReadContext(wctx, time.Second, 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	long, err := rw.ReadContext(wctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.Unlock(wctx); err != nil {
		t.Fatal(err)
	}
	waitDone(t, short, 5*time.Second, "the short downgrade")
	time.Sleep(50 * time.Millisecond) // past its deadline in Redis too
	if long.Err() != nil {
		t.Fatalf("the watchdog downgrade ended with its sibling: %v", context.Cause(long))
	}
	ok, err := other.RWMutex(name).TryLock(ctx, 0, 0)
	if ok || err != nil {
		t.Fatalf("a writer got in beside a live read hold: %v, %v", ok, err)
	}
	if err := rw.RUnlock(short); !errors.Is(err, ErrLockLost) {
		t.Errorf("RUnlock of the ended short downgrade: %v, want ErrLockLost", err)
	}
	if err := rw.RUnlock(long); err != nil {
		t.Fatal(err)
	}
}

// Goroutine A re-enters a short lease and loses it; B then takes the same
// handle. A's balanced Unlocks with its hold's context report the loss and
// never touch B's hold.
func TestBalancedUnlocksAfterLossSpareTheNextHold(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	const name = "own28:balanced"
	m := c.Mutex(name)
	hctx, err := m.TryLockContext(ctx, 0, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := m.TryLock(hctx, 0, 100*time.Millisecond); !ok || err != nil {
		t.Fatalf("re-entry: %v, %v", ok, err)
	}
	waitDone(t, hctx, 5*time.Second, "the 100ms lease")
	waitGone(t, c, name, 5*time.Second)
	if err := m.Unlock(hctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("first Unlock of the lost hold: %v, want ErrLockLost", err)
	}
	bctx, err := m.LockContext(ctx) // B, on the same handle
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(hctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("second Unlock of the lost hold: %v, want ErrLockLost", err)
	}
	if bctx.Err() != nil {
		t.Fatalf("A's Unlock ended B's hold: %v", context.Cause(bctx))
	}
	info, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Locked || len(info.Holders) != 1 || info.Token != TokenFrom(bctx) {
		t.Fatalf("B's hold is not the one in Redis: %+v", info)
	}
	if err := m.Unlock(bctx); err != nil {
		t.Fatal(err)
	}
}

// TryLock and TryRLock never answer (true, err): a failed re-entry is not a
// hold.
func TestFailedReentryIsNotAHold(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	m := c.Mutex("own28:tryreenter")
	hctx, err := m.TryLockContext(ctx, 0, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, hctx, 5*time.Second, "the 50ms lease")
	ok, err := m.TryLock(context.WithoutCancel(hctx), 0, 0)
	if ok || err == nil {
		t.Errorf("Mutex.TryLock re-entering a lost hold: (%v, %v), want (false, a loss)", ok, err)
	}
	if err := m.Unlock(hctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock: %v", err)
	}

	// The hold is gone in Redis while the process still thinks it holds it.
	m2 := c.Mutex("own28:tryreenter2")
	hctx2 := lockCtx(t, m2)
	if _, err := newClient(t, shared).Mutex(m2.Name()).ForceUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	ok, err = m2.TryLock(context.WithoutCancel(hctx2), 0, 0)
	if ok || err == nil {
		t.Errorf("Mutex.TryLock re-entering a forced hold: (%v, %v), want (false, a loss)", ok, err)
	}
	_ = m2.Unlock(hctx2)

	rw := c.RWMutex("own28:tryreenter-rw")
	rctx, err := rw.ReadContext(ctx, 0, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, rctx, 5*time.Second, "the 50ms read lease")
	ok, err = rw.TryRLock(context.WithoutCancel(rctx), 0, 0)
	if ok || err == nil {
		t.Errorf("TryRLock re-entering a lost hold: (%v, %v), want (false, a loss)", ok, err)
	}
	_ = rw.RUnlock(rctx)
	wctx, err := rw.WriteContext(ctx, 0, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, wctx, 5*time.Second, "the 50ms write lease")
	ok, err = rw.TryLock(context.WithoutCancel(wctx), 0, 0)
	if ok || err == nil {
		t.Errorf("RWMutex.TryLock re-entering a lost hold: (%v, %v), want (false, a loss)", ok, err)
	}
	_ = rw.Unlock(wctx)
}
