package dlock

import (
	"testing"
	"time"
)

// go-redis resends a script whose reply was lost. These tests send the very
// same call twice and check that it counts once.

func TestRepeatedAcquireCountsOnce(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	m := c.Mutex("idem-acquire")
	ttl := time.Minute
	first, err := m.attempt(ctx, ttl, 0, "", false)
	if err != nil || first.status != 1 {
		t.Fatal(first, err)
	}
	again, err := m.attempt(ctx, ttl, 0, "", false)
	if err != nil || again.status != 1 || again.count != 1 || again.token != first.token {
		t.Fatalf("repeated fresh acquire = %+v, %v; want count 1 and token %d", again, err, first.token)
	}
	// A repeated re-entry (expected count 1) counts once too.
	for range 2 {
		if res, err := m.attempt(ctx, ttl, 1, "", false); err != nil || res.count != 2 {
			t.Fatalf("re-entry = %+v, %v; want count 2", res, err)
		}
	}
	if n, _ := m.HoldCount(ctx); n != 2 {
		t.Fatalf("HoldCount = %d, want 2", n)
	}
	rdbFor(t, r).Del(ctx, "idem-acquire")
}

// A resent queueing call does not queue the waiter twice.
func TestRepeatedQueueingQueuesOnce(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	h := c.Mutex("idem-queue")
	mustLock(t, h)
	w := c.Mutex("idem-queue")
	entry := "42 30000 " + w.field
	for range 2 {
		if res, err := w.attempt(ctx, 30*time.Second, 0, entry, false); err != nil || res.status != 0 {
			t.Fatal(res, err)
		}
	}
	if q, _ := rdbFor(t, r).LRange(ctx, w.ks.Queue, 0, -1).Result(); len(q) != 1 || q[0] != entry {
		t.Fatalf("queue after a resent queueing call = %q, want one entry", q)
	}
	rdbFor(t, r).Del(ctx, w.ks.Queue)
	mustUnlock(t, h)
}

func TestRepeatedReleaseCountsOnce(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	m := c.Mutex("idem-release")
	rdb := rdbFor(t, r)
	rdb.HSet(ctx, "idem-release", m.field, 3)
	rdb.PExpire(ctx, "idem-release", time.Minute)
	release := func(expected int, req string) []int64 {
		t.Helper()
		r, err := readSmall(scriptRelease.run(ctx, rdb, m.keyArgs, m.field, expected, req, 30000, 2000, 60000, "0"))
		if err != nil {
			t.Fatal(err)
		}
		return r.v[:r.n]
	}
	for range 2 {
		if v := release(3, "req-1"); v[0] != 1 || v[1] != 2 {
			t.Fatalf("release from 3 = %v, want [1 2]", v)
		}
	}
	if n, _ := m.HoldCount(ctx); n != 2 {
		t.Fatalf("count after a repeated decrement = %d, want 2", n)
	}
	// 2 -> 1, resent: the resend finds count 1 and must not release.
	for range 2 {
		if v := release(2, "req-15"); v[0] != 1 || v[1] != 1 {
			t.Fatalf("release from 2 = %v, want [1 1] both times", v)
		}
	}
	if l, _ := m.IsLocked(ctx); !l {
		t.Fatal("a resent 2 -> 1 decrement released the lock")
	}
	for range 2 {
		if v := release(1, "req-2"); v[0] != 1 || v[1] != 0 {
			t.Fatalf("final release = %v, want [1 0] both times", v)
		}
	}
	if v := release(1, "req-3"); v[0] != 0 {
		t.Fatalf("a different release of a free lock = %v, want [0]", v)
	}
	if ttl, _ := rdb.PTTL(ctx, m.ks.Latch).Result(); ttl <= 0 || ttl > 30*time.Second {
		t.Fatalf("latch TTL = %v", ttl)
	}
}

// A hold found already ours by a first attempt (a resent call, or a hand-off
// whose message was missed) gets the caller's full TTL, not the hand-off's
// short claim window, and no duplicate queue entry survives.
func TestAttemptFindingOwnHoldRestoresTTL(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	m := c.Mutex("idem-claim")
	rdb := rdbFor(t, r)
	rdb.HSet(ctx, "idem-claim", m.field, 1)
	rdb.PExpire(ctx, "idem-claim", 200*time.Millisecond) // a claim window
	entry := "9 30000 " + m.field
	rdb.RPush(ctx, m.ks.Queue, entry, entry)
	rdb.PExpire(ctx, m.ks.Queue, time.Minute)
	res, err := m.attempt(ctx, 30*time.Second, 0, entry, false)
	if err != nil || res.status != 1 {
		t.Fatal(res, err)
	}
	if ttl, _ := rdb.PTTL(ctx, "idem-claim").Result(); ttl < 29*time.Second {
		t.Fatalf("TTL after finding our own hold = %v, want the full 30s", ttl)
	}
	if n, _ := rdb.LLen(ctx, m.ks.Queue).Result(); n != 0 {
		t.Fatalf("%d duplicate entries left in the queue", n)
	}
	rdb.Del(ctx, "idem-claim")
}
