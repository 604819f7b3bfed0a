package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestTryLockNoWaitIsOneAttempt(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	holder := a.Mutex("one-attempt")
	mustLock(t, holder)
	// The holder's Client subscribes its own channel (for ForceUnlock's
	// news) in the background: let that happen before counting.
	waitSubscribed(t, ctx, rdbFor(t, r), a)
	resetCounts(t, ctx, r)
	for _, wait := range []time.Duration{0, -time.Second} {
		ok, err := b.Mutex("one-attempt").TryLock(ctx, wait, 0)
		if ok || err != nil {
			t.Fatalf("TryLock(wait=%v) on a held lock = %v, %v; want false, nil", wait, ok, err)
		}
	}
	if n := commands(t, r)["evalsha"]; n != 2 {
		t.Fatalf("two no-wait attempts sent %d scripts, want 2", n)
	}
	if n := commands(t, r)["subscribe"]; n != 0 {
		t.Fatalf("a no-wait attempt subscribed (%d)", n)
	}
	mustUnlock(t, holder)
}

func TestTryLockLeaseIsFixed(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	m := c.Mutex("fixed-lease")
	ok, err := m.TryLock(ctx, 0, 400*time.Millisecond)
	if !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	ttl, err := m.RemainingTTL(ctx)
	if err != nil || ttl <= 300*time.Millisecond || ttl > 400*time.Millisecond {
		t.Fatalf("RemainingTTL = %v, %v; want the 400ms lease", ttl, err)
	}
	// A watchdog would have renewed it several times by now.
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("hold did not end at the lease")
	}
	if !errors.Is(m.Err(), ErrLockLost) {
		t.Fatalf("Err after the lease = %v, want ErrLockLost", m.Err())
	}
	waitFor(t, "the key to expire", func() bool { l, _ := m.IsLocked(ctx); return !l })
	if err := m.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock after the lease = %v, want ErrLockLost", err)
	}
}

func TestWatchdogKeepsLockAlive(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	m := c.Mutex("watchdog")
	ok, err := m.TryLock(ctx, 0, -1)
	if !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	ttl, _ := m.RemainingTTL(ctx)
	if ttl <= 0 || ttl > 300*time.Millisecond {
		t.Fatalf("watchdog TTL = %v, want <= 300ms", ttl)
	}
	time.Sleep(time.Second) // three timeouts
	if l, err := m.IsLocked(ctx); !l || err != nil {
		t.Fatalf("after 3 watchdog timeouts IsLocked = %v, %v", l, err)
	}
	if m.Err() != nil {
		t.Fatalf("hold lost: %v", m.Err())
	}
	mustUnlock(t, m)
	if n := c.e.Renewals(); n != 0 {
		t.Fatalf("renewer still has %d entries after the final Unlock", n)
	}
}

func TestWaitRunsOut(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	mustLock(t, a.Mutex("runs-out"))
	w := b.Mutex("runs-out")
	start := time.Now()
	ok, err := w.TryLock(ctx, 150*time.Millisecond, 0)
	if ok || err != nil {
		t.Fatalf("TryLock = %v, %v; want false, nil", ok, err)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("gave up after %v, before the 150ms wait", waited)
	}
	// The waiter leaves the queue in the background (ctx is law): soon.
	waitFor(t, "the timed-out waiter to leave the queue", func() bool {
		n, _ := rdbFor(t, r).LLen(ctx, w.p.Keys().Queue).Result()
		return n == 0
	})
}

func TestCancelledContext(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	mustLock(t, a.Mutex("cancel"))

	pre, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Mutex("cancel").TryLock(pre, time.Second, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLock with a cancelled ctx = %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	w := b.Mutex("cancel")
	if err := w.Lock(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cancelled while waiting = %v", err)
	}
	waitFor(t, "the cancelled waiter to leave the queue", func() bool {
		n, _ := rdbFor(t, r).LLen(ctxT(t), w.p.Keys().Queue).Result()
		return n == 0
	})
	if w.Token() != 0 {
		t.Fatal("a cancelled waiter has a token")
	}
}

func TestReentrancyAndOwnership(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	m := c.Mutex("reentrant")
	other := newClient(t, r).Mutex("reentrant") // another Client: another owner
	hctx := lockCtx(t, m)
	tok := m.Token()
	if err := m.Lock(hctx); err != nil { // re-entry: hctx carries the hold
		t.Fatal(err)
	}
	if n, _ := m.HoldCount(ctx); n != 2 {
		t.Fatalf("HoldCount after two Locks = %d", n)
	}
	if m.Token() != tok {
		t.Fatal("re-entry changed the token")
	}
	if ok, err := other.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("another handle got a held lock: %v, %v", ok, err)
	}
	if err := other.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock by a non-owner = %v, want ErrNotHeld", err)
	}
	if n, _ := m.HoldCount(ctx); n != 2 {
		t.Fatalf("a non-owner's Unlock changed the count to %d", n)
	}
	// The same Client's handle of the name is m: its Unlock counts down.
	if err := c.Mutex("reentrant").Unlock(ctx); err != nil {
		t.Fatalf("Unlock through the name looked up again: %v", err)
	}
	if l, _ := m.IsLocked(ctx); !l {
		t.Fatal("released at count 1")
	}
	mustUnlock(t, m)
	if l, _ := m.IsLocked(ctx); l {
		t.Fatal("not released at count 0")
	}
	if err := m.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("extra Unlock = %v, want ErrNotHeld", err)
	}
	if ok, err := other.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("other handle after release: %v, %v", ok, err)
	}
	mustUnlock(t, other)
}

func TestLayoutIsRedissons(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	m := c.Mutex("layout")
	if err := m.Lock(lockCtx(t, m)); err != nil {
		t.Fatal(err)
	}
	rdb := rdbFor(t, r)
	h, err := rdb.HGetAll(ctx, "layout").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 || h[m.Owner()] != "2" {
		t.Fatalf("lock hash = %v, want {%s: 2}", h, m.Owner())
	}
	if ttl, _ := rdb.PTTL(ctx, "layout").Result(); ttl <= 0 {
		t.Fatalf("lock PTTL = %v", ttl)
	}
	if ttl, _ := rdb.PTTL(ctx, m.p.Keys().Fence).Result(); ttl <= 0 {
		t.Fatalf("fence key PTTL = %v, want a TTL", ttl)
	}
	mustUnlock(t, m)
	mustUnlock(t, m)
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
