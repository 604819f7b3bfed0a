package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A fixed-lease hold outlives its first lease once extended, in Redis and
// for its holder: nobody else gets the lock, and no loss is declared.
func TestMutexExtend(t *testing.T) {
	a, b := newClient(t, shared), newClient(t, shared)
	ctx := ctxT(t)
	m := a.Mutex("extend:m")
	if ok, err := m.TryLock(ctx, 0, 300*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := m.Extend(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // twice the first lease
	if err := m.Err(); err != nil {
		t.Fatalf("extended hold declared lost: %v", err)
	}
	if ttl, err := m.RemainingTTL(ctx); err != nil || ttl < time.Second {
		t.Fatalf("TTL after Extend = %v, %v; want the new lease's", ttl, err)
	}
	if ok, err := b.Mutex("extend:m").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("another client took an extended hold: %v %v", ok, err)
	}
	mustUnlock(t, m)
	if err := m.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend after Unlock = %v, want ErrNotHeld", err)
	}
}

// Extend refuses what it cannot do before any call: a watchdog hold, a
// lease <= 0; and it reports a lease that already ran out as lost.
func TestExtendRefusals(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	w := c.Mutex("extend:wd")
	mustLock(t, w)
	for _, d := range []time.Duration{0, -time.Second} {
		if err := w.Extend(ctx, d); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Extend(%v) = %v, want ErrInvalidArgument", d, err)
		}
	}
	if err := w.Extend(ctx, time.Second); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Extend of a watchdog hold = %v, want ErrInvalidArgument", err)
	}
	mustUnlock(t, w)
	short := c.Mutex("extend:short")
	if ok, err := short.TryLock(ctx, 0, 50*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	<-short.Done()
	if err := short.Extend(ctx, time.Second); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Extend after the lease ran out = %v, want ErrLockLost", err)
	}
	// The holder is told a drift margin (1% + 2ms) before Redis lets go.
	time.Sleep(20 * time.Millisecond)
	if ok, _ := short.IsLocked(ctx); ok {
		t.Fatal("Extend revived a lease that had run out")
	}
	_ = short.Unlock(ctx)
}

// Both sides of an RWMutex and a Permit extend the same way.
func TestRWMutexAndPermitExtend(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	rw := c.RWMutex("extend:rw")
	if ok, err := rw.TryRLock(ctx, 0, 200*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := rw.RExtend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p, err := c.Semaphore("extend:sem", 1).Acquire(ctx, 0, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if rw.r.Err() != nil || p.Err() != nil {
		t.Fatalf("extended read hold or permit lost: %v, %v", rw.r.Err(), p.Err())
	}
	if _, err := c.Semaphore("extend:sem", 1).Acquire(ctx, 0, 0); !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("a second permit of an extended one: %v", err)
	}
	if err := rw.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := rw.TryLock(ctx, 0, 100*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := rw.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Permit.Extend after Release = %v, want ErrNotHeld", err)
	}
}

// Proclaim changes the leader's value in the same term: Leader and Observe
// see it, by event; after the leadership ends it fails.
func TestElectionProclaim(t *testing.T) {
	c, o := newClient(t, shared), newClient(t, shared)
	ctx := ctxT(t)
	e := c.Election("proclaim")
	lctx, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := o.Election("proclaim").Observe(octx)
	if v := <-seen; v != "a" {
		t.Fatalf("Observe = %q, want a", v)
	}
	start := time.Now()
	if err := e.Proclaim(lctx, "b"); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-seen:
		if v != "b" {
			t.Fatalf("Observe after Proclaim = %q, want b", v)
		}
		t.Logf("Proclaim to Observe: %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("Observe did not see the proclaimed value")
	}
	if v, err := o.Election("proclaim").Leader(ctx); v != "b" || err != nil {
		t.Fatalf("Leader = %q, %v; want b", v, err)
	}
	if err := e.Resign(lctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(lctx, "c"); err == nil {
		t.Fatal("Proclaim after Resign returned nil")
	}
	if err := e.Proclaim(ctx, "c"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Proclaim without leadership = %v, want ErrNotHeld", err)
	}
}

// Extend picks the hold ctx carries, as Unlock does: of two read holds of
// one handle, the one whose context is given is extended, the other runs
// out.
func TestExtendPicksTheContextsHold(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	rw := c.RWMutex("extend:pick")
	first, err := rw.ReadContext(ctx, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	second, err := rw.ReadContext(ctx, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.RExtend(first, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	<-second.Done() // the second hold's lease runs out
	if !errors.Is(context.Cause(second), ErrLeaseEnded) {
		t.Fatalf("the other hold ended with %v, want ErrLeaseEnded", context.Cause(second))
	}
	if err := first.Err(); err != nil {
		t.Fatalf("the extended hold ended with its first lease: %v", context.Cause(first))
	}
	if err := rw.RUnlock(first); err != nil {
		t.Fatal(err)
	}
	_ = rw.RUnlock(second)
}

// Extend never shortens a TTL in Redis, so a call that lands late (its
// caller gone, or resent by the wire) cannot cut short a later Extend's
// lease, which would let another Client in while its holder still counts on
// it. An Extend to less than what is left moves only the holder's deadline:
// it is told when that passes, and its Unlock still releases.
func TestExtendNeverShortensRedisTTL(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	rdb := rdbFor(t, r)
	ctx := ctxT(t)
	const name = "extend:shorter"
	m := a.Mutex(name)
	if ok, err := m.TryLock(ctx, 0, 10*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := m.Extend(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := rdb.PTTL(ctx, name).Val(); d < 5*time.Second {
		t.Fatalf("the lock's TTL after an Extend to a shorter lease = %v, want the 10s lease's", d)
	}
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("the holder was never told of its shorter lease's end")
	}
	if !errors.Is(m.Err(), ErrLeaseEnded) {
		t.Fatalf("the hold ended with %v, want ErrLeaseEnded", m.Err())
	}
	if ok, err := b.Mutex(name).TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("another Client took the lock while Redis still gave it to the first: %v %v", ok, err)
	}
	_ = m.Unlock(ctx) // answers the loss, and releases what Redis still has
	if n := rdb.Exists(ctx, name).Val(); n != 0 {
		t.Fatal("Unlock after the shorter lease's end left the lock in Redis")
	}

	p, err := a.Semaphore("extend:shorter:sem", 1).Acquire(ctx, 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Extend(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	exp := rdb.ZRangeWithScores(ctx, "dlock:semaphore:{extend:shorter:sem}", 0, -1).Val()
	now := rdb.Time(ctx).Val().UnixMilli()
	if len(exp) != 1 || int64(exp[0].Score)-now < 5000 {
		t.Fatalf("the permit's expiry after an Extend to a shorter lease: %v (now %d), want the 10s lease's", exp, now)
	}
	_ = p.Release(ctx)
}

// An Extend whose ctx ends before Redis answers returns ctx's error at once,
// and the hold keeps its deadline: the call, if it runs, can only lengthen
// what Redis has.
func TestAbandonedExtendKeepsTheHold(t *testing.T) {
	r := testenvRedis(t)
	a := newClient(t, r)
	rdb := rdbFor(t, r)
	ctx := ctxT(t)
	const name = "extend:abandoned"
	m := a.Mutex(name)
	if ok, err := m.TryLock(ctx, 0, 10*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := r.Pause(); err != nil { // accepts and does not answer
		t.Fatal(err)
	}
	ectx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := m.Extend(ectx, 200*time.Millisecond)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Extend on a paused Redis: %v, want its ctx's error", err)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // past the abandoned call's lease
	if err := m.Err(); err != nil {
		t.Fatalf("the hold ended after an abandoned Extend: %v", err)
	}
	if d := rdb.PTTL(ctx, name).Val(); d < 5*time.Second {
		t.Fatalf("the lock's TTL after an abandoned shorter Extend = %v, want the 10s lease's", d)
	}
	mustUnlock(t, m)
}
