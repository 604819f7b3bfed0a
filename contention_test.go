package dlock

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Several Clients, each with its own connection pool, and several goroutines
// per Client take one lock over and over, every third time with a fixed
// lease. Inside the critical section a counter must never see two holders;
// the recorded history must show no overlap and tokens increasing in grant
// order (see contend).
func TestContentionManyClients(t *testing.T) {
	contend(t, func(c *Client, g, i int) familyHold {
		m := c.Mutex("hot")
		var l Locker = m
		if i%3 == 2 {
			l = leased{m}
		}
		return familyHold{l: l, token: m.Token}
	})
}

// leased takes a Mutex with TryLock and a fixed lease instead of Lock.
type leased struct{ *Mutex }

func (l leased) Lock(ctx context.Context) error {
	ok, err := l.TryLock(ctx, 20*time.Second, 10*time.Second)
	if err == nil && !ok {
		err = fmt.Errorf("%s: wait ran out", l.Name())
	}
	return err
}

// A waiter whose process dies while queued delays the lock by at most the
// claim window plus one re-check, not by a whole lease.
func TestCrashedWaiterDoesNotStall(t *testing.T) {
	r := testenvRedis(t)
	holderC := newClient(t, r)
	ctx := ctxT(t)
	h := holderC.Mutex("crash")
	mustLock(t, h)
	rdb := rdbFor(t, r)
	// A queued waiter of a client that no longer exists.
	if err := rdb.RPush(ctx, h.p.Keys().Queue, "7 30000 dead-client:1").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, h.p.Keys().Queue, time.Minute)
	live := newClient(t, r, WithHandoffClaim(200*time.Millisecond), withRecheck(300*time.Millisecond))
	w := live.Mutex("crash")
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "live waiter queued", func() bool { n, _ := rdb.LLen(ctx, h.p.Keys().Queue).Result(); return n == 2 })
	start := time.Now()
	// The holder's claim window is the holder client's (2s): the dead waiter
	// holds the lock that long at most.
	mustUnlock(t, h)
	awaitNil(t, got, 20*time.Second, "a crashed waiter stalled the lock")
	if waited := time.Since(start); waited > 2*time.Second+300*time.Millisecond+2*time.Second {
		t.Errorf("waited %v behind a dead waiter, want about claim (2s) + re-check (300ms)", waited)
	}
	mustUnlock(t, w)
}

// WithLock returns fn's error untouched and always releases, even when the
// caller's context is already cancelled at that point.
func TestWithLock(t *testing.T) {
	c := newClient(t, shared)
	other := newClient(t, shared)
	ctx := ctxT(t)
	sentinel := fmt.Errorf("business error")
	err := c.WithLock(ctx, "with", func(ctx context.Context) error {
		if ok, _ := other.Mutex("with").TryLock(ctx, 0, 0); ok {
			t.Error("lock not held inside WithLock")
		}
		return sentinel
	})
	if err != sentinel {
		t.Fatalf("WithLock = %v, want fn's error itself", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	err = c.WithLock(cctx, "with", func(context.Context) error { cancel(); return nil })
	if err != nil {
		t.Fatalf("WithLock with ctx cancelled inside fn = %v", err)
	}
	// Released all the same, detached from the ended ctx.
	waitFor(t, "the release after a cancelled ctx", func() bool { l, _ := other.Mutex("with").IsLocked(ctx); return !l })
	blocker := other.Mutex("with")
	mustLock(t, blocker)
	err = c.WithLock(ctx, "with", func(context.Context) error { return nil }, WaitTime(50*time.Millisecond))
	if !errorsIs(err, ErrWaitTimeout) {
		t.Fatalf("WithLock on a held lock = %v, want ErrWaitTimeout", err)
	}
	mustUnlock(t, blocker)
}
