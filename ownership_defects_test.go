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
	// The process declares a lease over no later than Redis ends it, so the
	// read field may outlive rctx by a round trip: wait for it.
	wctx, err := rw.WriteContext(ctx, 5*time.Second, 50*time.Millisecond)
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

// A re-entry never moves the hold's end in Redis: the holder is told when
// the hold ends, and Redis ends it then, whatever lease the re-entry asks.
func TestReentryKeepsTheHoldsEnd(t *testing.T) {
	c := newClient(t, shared, WithWatchdogTimeout(2*time.Second))
	ctx := ctxT(t)
	m := c.Mutex("own28:reentryttl")
	hctx, err := m.TryLockContext(ctx, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(hctx); err != nil { // watchdog mode asked
		t.Fatal(err)
	}
	if ok, err := m.TryLock(hctx, 0, time.Hour); !ok || err != nil {
		t.Fatalf("re-entry with a longer lease: %v, %v", ok, err)
	}
	if ttl, err := m.RemainingTTL(ctx); err != nil || ttl > 300*time.Millisecond {
		t.Fatalf("a 300ms hold re-entered has %v left in Redis (%v)", ttl, err)
	}
	waitDone(t, hctx, 5*time.Second, "the 300ms hold")
	waitGone(t, c, m.Name(), time.Second) // by its own TTL, not a re-entry's
	for range 3 {
		_ = m.Unlock(hctx)
	}

	// A watchdog hold re-entered with a fixed lease keeps the watchdog's TTL.
	w := c.Mutex("own28:reentryttl-w")
	wctx := lockCtx(t, w)
	if ok, err := w.TryLock(wctx, 0, time.Hour); !ok || err != nil {
		t.Fatalf("re-entry: %v, %v", ok, err)
	}
	if ttl, err := w.RemainingTTL(ctx); err != nil || ttl > 2*time.Second {
		t.Fatalf("a watchdog hold re-entered with a 1h lease has %v in Redis (%v)", ttl, err)
	}
	_ = w.Unlock(wctx)
	_ = w.Unlock(wctx)

	rw := c.RWMutex("own28:reentryttl-rw")
	rwctx, err := rw.WriteContext(ctx, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := rw.TryLock(rwctx, 0, time.Hour); !ok || err != nil {
		t.Fatalf("write re-entry: %v, %v", ok, err)
	}
	if info, err := c.Inspect(ctx, rw.Name()); err != nil || info.TTL > 300*time.Millisecond {
		t.Fatalf("a 300ms write hold re-entered has %v in Redis (%v)", info.TTL, err)
	}
	_ = rw.Unlock(rwctx)
	_ = rw.Unlock(rwctx)
}

// A short write hold that takes a watchdog downgrade ends in Redis when its
// holder is told: the read hold goes on alone, and other readers may join.
func TestShortWriteHoldEndsBesideItsDowngrade(t *testing.T) {
	c, other := newClient(t, shared), newClient(t, shared)
	ctx := ctxT(t)
	const name = "own28:shortwrite"
	rw := c.RWMutex(name)
	wctx, err := rw.WriteContext(ctx, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	rctx, err := rw.ReadContext(wctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, wctx, 5*time.Second, "the 300ms write hold")
	time.Sleep(20 * time.Millisecond)
	reader := other.RWMutex(name)
	ok, err := reader.TryRLock(ctx, 0, 0)
	if !ok || err != nil {
		info, _ := c.Inspect(ctx, name)
		t.Fatalf("a reader is kept out by a write hold whose holder was told it ended: %v, %v; %+v", ok, err, info)
	}
	if rctx.Err() != nil {
		t.Fatalf("the downgrade ended with the write hold: %v", context.Cause(rctx))
	}
	if err := reader.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.RUnlock(rctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.Unlock(wctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock of the ended write hold: %v, want ErrLockLost", err)
	}
}

// Unlock of a lost, re-entered hold reports the loss at every count, and so
// does a nested WithLock.
func TestUnlockOfLostReentryReportsTheLoss(t *testing.T) {
	c := newClient(t, shared, WithMaxHold(100*time.Millisecond))
	ctx := ctxT(t)
	m := c.Mutex("own28:lostreentry")
	hctx := lockCtx(t, m)
	if err := m.Lock(hctx); err != nil {
		t.Fatal(err)
	}
	waitDone(t, hctx, 5*time.Second, "the MaxHold")
	for i := range 2 {
		// Without hctx's cancellation, Unlock waits for the release's
		// answer rather than returning the ctx's cause at once.
		if err := m.Unlock(context.WithoutCancel(hctx)); !errors.Is(err, ErrMaxHold) {
			t.Errorf("Unlock %d of the lost hold: %v, want ErrMaxHold", i+1, err)
		}
	}
	var inner error
	err := c.WithLock(ctx, "own28:lostreentry-wl", func(outer context.Context) error {
		inner = c.WithLock(context.WithoutCancel(outer), "own28:lostreentry-wl", func(in context.Context) error {
			<-in.Done()
			return nil
		})
		return nil
	})
	if !errors.Is(inner, ErrMaxHold) || !errors.Is(err, ErrMaxHold) {
		t.Errorf("nested WithLock over a lost hold: inner %v, outer %v; want ErrMaxHold", inner, err)
	}
}

// A re-entry's context carries its own lock's grant.
func TestReentryContextCarriesItsOwnGrant(t *testing.T) {
	c := newClient(t, shared)
	a, b := c.Mutex("own28:grant-a"), c.Mutex("own28:grant-b")
	actx := lockCtx(t, a)
	bctx, err := b.LockContext(actx)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := a.LockContext(bctx)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := GrantFrom(a2); TokenFrom(a2) != TokenFrom(actx) || g.Name != a.Name() {
		t.Errorf("a's re-entry carries %+v; a's token is %d", g, TokenFrom(actx))
	}
	rw := c.RWMutex("own28:grant-rw")
	wctx, err := rw.WriteContext(bctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := rw.WriteContext(bctx, 0, 0) // bctx does not carry it: waits, fails
	if err == nil {
		t.Fatalf("a second write hold on one handle: %v", TokenFrom(w2))
	}
	w3, err := rw.WriteContext(wctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if TokenFrom(w3) != TokenFrom(wctx) {
		t.Errorf("write re-entry carries token %d, want %d", TokenFrom(w3), TokenFrom(wctx))
	}
	for _, f := range []func() error{
		func() error { return rw.Unlock(w3) }, func() error { return rw.Unlock(wctx) },
		func() error { return a.Unlock(a2) }, func() error { return b.Unlock(bctx) }, func() error { return a.Unlock(actx) },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
}

// A call that returns because its ctx is done answers an error that
// matches ctx.Err() and the ctx's cause.
func TestDoneContextErrorsAreTyped(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	m := c.Mutex("own28:donectx")
	hctx := lockCtx(t, m)
	if err := m.Unlock(hctx); err != nil {
		t.Fatal(err)
	}
	_, err := m.TryLock(hctx, 0, 0)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrReleased) {
		t.Errorf("TryLock with a released hold's ctx: %v; want context.Canceled and ErrReleased", err)
	}
	if !errors.Is(context.Cause(hctx), ErrReleased) {
		t.Errorf("a released hold's ctx cause: %v", context.Cause(hctx))
	}

	lctx, err := m.TryLockContext(ctx, 0, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, lctx, 5*time.Second, "the 30ms lease")
	_, err = m.TryLock(lctx, 0, 0)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrLeaseEnded) {
		t.Errorf("TryLock with a lost hold's ctx: %v; want context.Canceled and ErrLeaseEnded", err)
	}
	if err := m.Unlock(context.WithoutCancel(lctx)); !errors.Is(err, ErrLeaseEnded) {
		t.Errorf("Unlock of the lost hold: %v", err)
	}

	mine := errors.New("my cause")
	cctx, cancel := context.WithCancelCause(ctx)
	cancel(mine)
	for what, err := range map[string]error{
		"Lock":     m.Lock(cctx),
		"WithLock": c.WithLock(cctx, m.Name(), func(context.Context) error { return nil }),
	} {
		if !errors.Is(err, context.Canceled) || !errors.Is(err, mine) {
			t.Errorf("%s with a ctx cancelled with a cause: %v; want context.Canceled and the cause", what, err)
		}
	}

	// Cancelled during the wait for another holder.
	holder := lockCtx(t, m)
	wctx, wcancel := context.WithCancelCause(ctx)
	got := make(chan error, 1)
	go func() { got <- newClient(t, shared).Mutex(m.Name()).Lock(wctx) }()
	time.Sleep(50 * time.Millisecond)
	wcancel(mine)
	if err := <-got; !errors.Is(err, context.Canceled) || !errors.Is(err, mine) {
		t.Errorf("Lock cancelled while waiting: %v; want context.Canceled and the cause", err)
	}
	// Unlock with an ended ctx: the release goes on, and the answer says why
	// Unlock returned before it was confirmed.
	dctx, dcancel := context.WithCancelCause(holder)
	dcancel(mine)
	if err := m.Unlock(dctx); err != nil && !(errors.Is(err, context.Canceled) && errors.Is(err, mine)) {
		t.Errorf("Unlock with a cancelled ctx: %v; want nil, or context.Canceled and the cause", err)
	}
	waitGone(t, c, m.Name(), 5*time.Second)
}

// The wait's own deadline is not the caller's: TryLock with a short wait on
// a held lock, from Clients that have not subscribed yet, answers (false,
// nil) or ErrUnavailable, never context.DeadlineExceeded.
func TestWaitDeadlineIsNotTheCallersDeadline(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	const name = "own28:waitdeadline"
	hctx := lockCtx(t, c.Mutex(name))
	for _, wait := range []time.Duration{300 * time.Microsecond, time.Millisecond, 2 * time.Millisecond} {
		for range 5 {
			m := newClient(t, shared).Mutex(name)
			if ok, err := m.TryLock(ctx, 0, 0); ok || err != nil { // warm: one answered attempt
				t.Fatalf("%v, %v", ok, err)
			}
			ok, err := m.TryLock(ctx, wait, 0)
			if ok || errors.Is(err, context.DeadlineExceeded) || (err != nil && !errors.Is(err, ErrUnavailable)) {
				t.Fatalf("TryLock(live ctx, %v) on a held lock: (%v, %v)", wait, ok, err)
			}
		}
	}
	if err := c.Mutex(name).Unlock(hctx); err != nil {
		t.Fatal(err)
	}
}

// A writer that downgraded keeps its write hold in Redis for as long as its
// renewals, or Extend, say it holds: the deadline it keeps beside its read
// holds moves with them.
func TestDowngradedWriterKeepsItsHoldWhileRenewed(t *testing.T) {
	c, other := newClient(t, shared, WithWatchdogTimeout(300*time.Millisecond)), newClient(t, shared)
	ctx := ctxT(t)
	const name = "own28:downgradedwriter"
	rw := c.RWMutex(name)
	wctx, err := rw.WriteContext(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	rctx, err := rw.ReadContext(wctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	fixed := c.RWMutex(name + "-fixed")
	fctx, err := fixed.WriteContext(ctx, 0, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	frctx, err := fixed.ReadContext(fctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := fixed.Extend(fctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // three watchdog timeouts; five 200ms leases
	for _, n := range []string{name, name + "-fixed"} {
		r := other.RWMutex(n)
		if ok, err := r.TryRLock(ctx, 0, 0); ok || err != nil {
			info, _ := c.Inspect(ctx, n)
			t.Errorf("%s: a reader got in beside a live write hold: %v, %v; %+v", n, ok, err, info)
			_ = r.RUnlock(ctx)
		}
	}
	for _, x := range []context.Context{wctx, rctx, fctx, frctx} {
		if x.Err() != nil {
			t.Fatalf("a hold ended: %v", context.Cause(x))
		}
	}
	for _, f := range []func() error{
		func() error { return rw.Unlock(wctx) }, func() error { return rw.RUnlock(rctx) },
		func() error { return fixed.Unlock(fctx) }, func() error { return fixed.RUnlock(frctx) },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
}
