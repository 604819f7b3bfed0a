package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A "forced" message that arrives while an Extend of the same hold is on
// its way must still make the hold ask Redis. The Extend ran before the
// ForceUnlock, so its reply says "held"; before, the recheck was skipped
// ("that call's reply tells the same") and the evicted holder of a fixed
// lease went on until its lease ended, beside the next holder.
func TestForcedDuringExtendStillTellsTheHolder(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	proxy := testenv.NewFaultProxy(t, r.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = prdb.Close() })
	holder, operator := newClientOn(t, prdb), newClient(t, r)
	ctx := ctxT(t)
	const name = "forced:during-extend"
	m := holder.Mutex(name)
	if ok, err := m.TryLock(ctx, 0, 30*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	waitSubscribed(t, ctx, rdb, holder)
	// The Extend's reply is held back a second; the force's message, sent
	// after the latency is lifted, is not.
	proxy.SetLatency(0, time.Second)
	extended := make(chan error, 1)
	go func() { extended <- m.Extend(ctx, time.Minute) }()
	waitFor(t, "the Extend ran in Redis", func() bool { return rdb.PTTL(ctx, name).Val() > 40*time.Second })
	proxy.SetLatency(0, 0)
	if ok, err := operator.Mutex(name).ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	if err := <-extended; err != nil && !errors.Is(err, ErrForced) {
		t.Fatalf("Extend: %v", err)
	}
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the evicted holder was not told within 5s: its recheck was skipped while the Extend was in flight")
	}
	if !errors.Is(m.Err(), ErrForced) {
		t.Fatalf("the hold ended with %v, want ErrForced", m.Err())
	}
	_ = m.Unlock(ctx)
}

// A lock key a neighbour overwrites with a value of another type is that
// hold's loss, and no other's: before, renew.lua's WRONGTYPE failed the
// whole batch, so every hold renewed with it (any lock of the Client) was
// declared lost at its deadline, with ErrRenewRefused, while Redis still
// gave it to its holder.
func TestRenewalOfAPoisonedKeyLosesOnlyThatHold(t *testing.T) {
	r := testenvRedis(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r, WithWatchdogTimeout(600*time.Millisecond))
	ctx := ctxT(t)
	poisoned, bystander := c.Mutex("renew:poisoned"), c.Mutex("renew:bystander")
	mustLock(t, poisoned)
	mustLock(t, bystander)
	if err := rdb.Set(ctx, "renew:poisoned", "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-poisoned.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the hold whose key was overwritten was never told")
	}
	if !errors.Is(poisoned.Err(), ErrLockLost) {
		t.Fatalf("the overwritten hold ended with %v", poisoned.Err())
	}
	time.Sleep(1500 * time.Millisecond) // more than two TTLs
	if err := bystander.Err(); err != nil {
		t.Fatalf("a hold renewed in the same batch as the overwritten key was lost: %v", err)
	}
	if d := rdb.PTTL(ctx, "renew:bystander").Val(); d <= 0 {
		t.Fatalf("the bystander's key: PTTL %v", d)
	}
	mustUnlock(t, bystander)
	_ = poisoned.Unlock(ctx)
	rdb.Del(ctx, "renew:poisoned")
}

// A WithLock nested in a hold of the same name (a re-entry) hands fn a
// context of the hold and cancels it when fn returns: what that context
// set up must go with it. Before, each one left a callback on the hold,
// waiting for its end, so a long hold whose work re-entered in a loop grew
// without bound.
func TestReentrantWithLockLeavesNothingOnTheHold(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	const name = "loss:withlock-reentry"
	m := c.Mutex(name)
	hctx, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := m.current(hctx)
	before := h.EndCallbacks()
	for range 100 {
		if err := c.WithLock(hctx, name, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if after := h.EndCallbacks(); after > before {
		t.Fatalf("100 re-entrant WithLocks left %d callbacks on the hold (%d before)", after, before)
	}
	if err := m.Unlock(hctx); err != nil {
		t.Fatal(err)
	}
}
