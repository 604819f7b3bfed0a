package dlock

import (
	"testing"
	"time"
)

// Every new hold gets a token greater than every earlier one: after a plain
// release, after the key expired, after DEL of the lock and of the counter,
// and after Redis restarted with its data gone.
func TestFencingTokensIncrease(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	var last uint64
	take := func(step string, m *Mutex, lease time.Duration) {
		t.Helper()
		ok, err := m.TryLock(ctx, 5*time.Second, lease)
		if !ok || err != nil {
			t.Fatalf("%s: TryLock = %v, %v", step, ok, err)
		}
		if tok := m.Token(); tok <= last {
			t.Fatalf("%s: token %d not above the previous %d", step, tok, last)
		}
		last = m.Token()
	}
	ma, mb := a.Mutex("fence"), b.Mutex("fence")
	for i := range 5 {
		m := ma
		if i%2 == 1 {
			m = mb
		}
		take("sequential", m, 0)
		mustUnlock(t, m)
	}

	take("before expiry", ma, 30*time.Millisecond)
	waitFor(t, "expiry", func() bool { n, _ := rdb.Exists(ctx, "fence").Result(); return n == 0 })
	_ = ma.Unlock(ctx) // lost: reports ErrLockLost
	take("after expiry", mb, 0)

	rdb.Del(ctx, "fence")
	_ = mb.Unlock(ctx)
	take("after DEL of the lock", ma, 0)

	rdb.Del(ctx, "fence", ma.p.Keys().Fence)
	_ = ma.Unlock(ctx)
	take("after DEL of the counter", mb, 0)
	mustUnlock(t, mb)

	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	take("after a restart without persistence", ma, 0)
	mustUnlock(t, ma)
}

// Hand-offs issue tokens too, and in grant order.
func TestFencingTokensOnHandoff(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	h := a.Mutex("fence-handoff")
	mustLock(t, h)
	t0 := h.Token()
	w := b.Mutex("fence-handoff")
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "queued", func() bool { n, _ := rdbFor(t, r).LLen(ctx, w.p.Keys().Queue).Result(); return n == 1 })
	mustUnlock(t, h)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if w.Token() <= t0 {
		t.Fatalf("hand-off token %d not above %d", w.Token(), t0)
	}
	mustUnlock(t, w)
}

// A hand-off issues a token above the releaser's even when the counter has
// expired meanwhile, and skips a queue entry that names no waiter.
func TestHandOffTokensIncreaseAfterCounterLoss(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	for _, step := range []string{"counter gone", "bad entry first"} {
		ma, mb := a.Mutex("fence-handoff"), b.Mutex("fence-handoff")
		mustLock(t, ma)
		got := make(chan error, 1)
		go func() { got <- mb.Lock(ctx) }()
		waitFor(t, "b queued", func() bool { n, _ := rdb.LLen(ctx, ma.p.Keys().Queue).Result(); return n == 1 })
		switch step {
		case "counter gone":
			rdb.Del(ctx, ma.p.Keys().Fence)
		case "bad entry first":
			rdb.LPush(ctx, ma.p.Keys().Queue, "not an entry")
		}
		before := ma.Token()
		mustUnlock(t, ma)
		awaitNil(t, got, 10*time.Second, step+": the waiter was not handed the lock")
		if mb.Token() <= before {
			t.Fatalf("%s: hand-off token %d not above the releaser's %d", step, mb.Token(), before)
		}
		if ttl, _ := rdb.PTTL(ctx, ma.p.Keys().Fence).Result(); ttl <= 0 {
			t.Fatalf("%s: the counter has no TTL after the hand-off (%v)", step, ttl)
		}
		mustUnlock(t, mb)
	}
}
