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
	h := c.Mutex("idem-acquire").testHold()
	ttl := time.Minute
	first, err := h.attemptRaw(ctx, ttl, 0, "", false)
	if err != nil || first.v[0] != 1 {
		t.Fatal(first, err)
	}
	// The resend finds its hold and takes a token of its own, above the
	// one whose reply was lost (which nobody saw).
	again, err := h.attemptRaw(ctx, ttl, 0, "", false)
	if err != nil || again.v[0] != 1 || again.v[1] != 1 || again.v[2] <= first.v[2] {
		t.Fatalf("repeated fresh acquire = %+v, %v; want count 1 and a token above %d", again, err, first.v[2])
	}
	// A repeated re-entry (expected count 1) counts once too.
	for range 2 {
		if res, err := h.attemptRaw(ctx, ttl, 1, "", false); err != nil || res.v[1] != 2 {
			t.Fatalf("re-entry = %+v, %v; want count 2", res, err)
		}
	}
	if n, _ := rdbFor(t, r).HGet(ctx, "idem-acquire", h.field()).Int(); n != 2 {
		t.Fatalf("hold count = %d, want 2", n)
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
	wh := w.testHold()
	entry := "42 30000 " + wh.field()
	for range 2 {
		if res, err := wh.attemptRaw(ctx, 30*time.Second, 0, entry, false); err != nil || res.v[0] != 0 {
			t.Fatal(res, err)
		}
	}
	if q, _ := rdbFor(t, r).LRange(ctx, w.p.Keys().Queue, 0, -1).Result(); len(q) != 1 || q[0] != entry {
		t.Fatalf("queue after a resent queueing call = %q, want one entry", q)
	}
	rdbFor(t, r).Del(ctx, w.p.Keys().Queue)
	mustUnlock(t, h)
}

// A queueing call resent after other waiters queued behind it still finds
// its entry: a waiter's entry is never in the queue twice, which lets the
// attempt that follows a hand-off skip looking for one.
func TestRepeatedQueueingBehindOthersQueuesOnce(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	h := c.Mutex("idem-queue-behind")
	mustLock(t, h)
	wh := c.Mutex("idem-queue-behind").testHold()
	xh := c.Mutex("idem-queue-behind").testHold()
	entry, other := "42 30000 "+wh.field(), "43 30000 "+xh.field()
	for _, q := range []struct {
		h     hold
		entry string
	}{{wh, entry}, {xh, other}, {wh, entry}} {
		if res, err := q.h.attemptRaw(ctx, 30*time.Second, 0, q.entry, false); err != nil || res.v[0] != 0 {
			t.Fatal(res, err)
		}
	}
	if q, _ := rdbFor(t, r).LRange(ctx, h.p.Keys().Queue, 0, -1).Result(); len(q) != 2 || q[0] != entry || q[1] != other {
		t.Fatalf("queue after a call resent behind another waiter = %q, want [%q %q]", q, entry, other)
	}
	rdbFor(t, r).Del(ctx, h.p.Keys().Queue)
	mustUnlock(t, h)
}

func TestRepeatedReleaseCountsOnce(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	m := c.Mutex("idem-release")
	h := m.testHold()
	rdb := rdbFor(t, r)
	// A fencing counter exists, as it does for every granted lock.
	res, err := h.attemptRaw(ctx, time.Minute, 0, "", false)
	if err != nil || res.v[0] != 1 {
		t.Fatal(res, err)
	}
	h.TestSetToken(uint64(res.v[2]))
	rdb.HSet(ctx, "idem-release", h.field(), 3)
	release := func(expected int) []int64 {
		t.Helper()
		r, err := h.releaseNow(ctx, expected, false)
		if err != nil {
			t.Fatal(err)
		}
		return r.v[:r.n]
	}
	for range 2 {
		if v := release(3); v[0] != 1 || v[1] != 2 {
			t.Fatalf("release from 3 = %v, want [1 2]", v)
		}
	}
	if n, _ := rdb.HGet(ctx, "idem-release", h.field()).Int(); n != 2 {
		t.Fatalf("count after a repeated decrement = %d, want 2", n)
	}
	// 2 -> 1, resent: the resend finds count 1 and must not release.
	for range 2 {
		if v := release(2); v[0] != 1 || v[1] != 1 {
			t.Fatalf("release from 2 = %v, want [1 1] both times", v)
		}
	}
	if l, _ := m.IsLocked(ctx); !l {
		t.Fatal("a resent 2 -> 1 decrement released the lock")
	}
	if v := release(1); v[0] != 1 || v[1] != 0 {
		t.Fatalf("final release = %v, want [1 0]", v)
	}
	// The resent final release finds the field gone, and says GONE (not
	// forced, not data lost): the holder, whose hold was still certain,
	// knows it was its own.
	if v := release(1); v[0] != 0 || v[1] != goneCode {
		t.Fatalf("resent final release = %v, want [0 %d]", v, goneCode)
	}
}

// A final release resent after the next holder has already released (the
// case a per-name latch got wrong) is still recognised as our own: Unlock
// reports success, not ErrLockLost.
func TestResentFinalReleaseAfterTheNextHolders(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	// The Client's channel is confirmed first: the renewal of every hold
	// that follows the confirmation would find the release below, which
	// the hold knows nothing of, and declare the hold lost.
	c.e.Hub().Listen()
	<-c.e.Hub().ClientReady()
	m := c.Mutex("idem-resent-final")
	mustLock(t, m)
	h := m.current(ctx)
	// Our release runs, then another owner takes and releases the lock,
	// then go-redis resends our release: what the hold sees is the resend.
	if v, err := h.releaseNow(ctx, 1, false); err != nil || v.v[0] != 1 {
		t.Fatal(v, err)
	}
	other := newClient(t, shared).Mutex("idem-resent-final") // another owner
	mustLock(t, other)
	mustUnlock(t, other)
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("Unlock whose release was resent after the next holder's = %v, want nil", err)
	}
	if m.Err() != nil {
		t.Fatalf("Err after a clean release = %v", m.Err())
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
	h := m.testHold()
	rdb := rdbFor(t, r)
	rdb.HSet(ctx, "idem-claim", h.field(), 1)
	rdb.PExpire(ctx, "idem-claim", 200*time.Millisecond) // a claim window
	entry := "9 30000 " + h.field()
	rdb.RPush(ctx, m.p.Keys().Queue, entry, entry)
	rdb.PExpire(ctx, m.p.Keys().Queue, time.Minute)
	res, err := h.attemptRaw(ctx, 30*time.Second, 0, entry, false)
	if err != nil || res.v[0] != 1 {
		t.Fatal(res, err)
	}
	if ttl, _ := rdb.PTTL(ctx, "idem-claim").Result(); ttl < 29*time.Second {
		t.Fatalf("TTL after finding our own hold = %v, want the full 30s", ttl)
	}
	if n, _ := rdb.LLen(ctx, m.p.Keys().Queue).Result(); n != 0 {
		t.Fatalf("%d duplicate entries left in the queue", n)
	}
	rdb.Del(ctx, "idem-claim")
}
