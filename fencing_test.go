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

	rdb.Del(ctx, "fence", ma.ks.Fence)
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
	waitFor(t, "queued", func() bool { n, _ := rdbFor(t, r).LLen(ctx, w.ks.Queue).Result(); return n == 1 })
	mustUnlock(t, h)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if w.Token() <= t0 {
		t.Fatalf("hand-off token %d not above %d", w.Token(), t0)
	}
	mustUnlock(t, w)
}
