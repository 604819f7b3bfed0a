package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Calls the ctx-law tests do not cover, made on holds taken before the
// link goes silent (a blackhole: Redis accepts, nothing comes back), with
// go-redis' own timeouts a minute: each must return within moments of its
// 100ms ctx.
func TestCtxLawOnHolds(t *testing.T) {
	r := testenvRedis(t)
	proxy := startBlackhole(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(),
		DialTimeout: time.Minute, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb, WithCloseTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Heal(); _ = c.Close() })
	ctx := ctxT(t)

	m := c.Mutex("law2:m")
	mctx, err := m.TryLockContext(ctx, time.Second, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m2 := c.Mutex("law2:m2")
	if err := m2.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	rw := c.RWMutex("law2:rw")
	rctx, err := rw.ReadContext(ctx, time.Second, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rw2 := c.RWMutex("law2:rw2")
	wctx, err := rw2.WriteContext(ctx, time.Second, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sem := c.Semaphore("law2:sem", 3)
	p1, err := sem.Acquire(ctx, time.Second, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := sem.Acquire(ctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	el := c.Election("law2:el")
	lctx, err := el.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	ml := c.MultiLock(c.Mutex("law2:a"), c.Mutex("law2:b"))
	mlctx, err := ml.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	latch := c.CountDownLatch("law2:latch")
	if _, err := latch.TrySetCount(ctx, 5, time.Minute); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()

	calls := map[string]func(ctx context.Context) error{
		"Mutex.Extend":       func(c2 context.Context) error { return m.Extend(withHold(c2, mctx), 5*time.Second) },
		"Mutex.HoldCount":    func(c2 context.Context) error { _, err := m.HoldCount(withHold(c2, mctx)); return err },
		"Mutex.RemainingTTL": func(c2 context.Context) error { _, err := m.RemainingTTL(c2); return err },
		"Mutex.reenter":      func(c2 context.Context) error { return m.Lock(withHold(c2, mctx)) },
		"Mutex.Unlock":       func(c2 context.Context) error { return m2.Unlock(c2) },
		"RW.RExtend":         func(c2 context.Context) error { return rw.RExtend(withHold(c2, rctx), 5*time.Second) },
		"RW.downgrade":       func(c2 context.Context) error { return rw2.RLock(withHold(c2, wctx)) },
		"RW.Extend":          func(c2 context.Context) error { return rw2.Extend(withHold(c2, wctx), 5*time.Second) },
		"RW.RUnlock":         func(c2 context.Context) error { return rw.RUnlock(withHold(c2, rctx)) },
		"Permit.Extend":      func(c2 context.Context) error { return p1.Extend(c2, 5*time.Second) },
		"Permit.Release":     func(c2 context.Context) error { return p2.Release(c2) },
		"Sem.SetPermits":     func(c2 context.Context) error { return sem.SetPermits(c2, 5) },
		"Sem.Available":      func(c2 context.Context) error { _, err := sem.Available(c2); return err },
		"Sem.AcquireN":       func(c2 context.Context) error { _, err := sem.AcquireN(c2, 2, time.Second, 0); return err },
		"El.Proclaim":        func(c2 context.Context) error { return el.Proclaim(c2, "you") },
		"El.ProclaimCtx":     func(c2 context.Context) error { return el.Proclaim(withHold(c2, lctx), "you") },
		"Latch.CountDown":    func(c2 context.Context) error { return latch.CountDown(c2) },
		"Latch.Count":        func(c2 context.Context) error { _, err := latch.Count(c2); return err },
		"Latch.TrySetCount":  func(c2 context.Context) error { _, err := latch.TrySetCount(c2, 3, time.Minute); return err },
		"LocksWithHistory":   func(c2 context.Context) error { _, err := c.LocksWithHistory(c2, "law2*"); return err },
		"ML.Unlock":          func(c2 context.Context) error { return ml.Unlock(withHold(c2, mlctx)) },
		"El.Resign":          func(c2 context.Context) error { return el.Resign(c2) },
	}
	checkLaw(t, "silent", 100*time.Millisecond, calls)
}

// withHold is ctx carrying the values (holds) of hold, with ctx's own
// deadline and cancellation.
func withHold(ctx, hold context.Context) context.Context {
	return valuesFrom{ctx, hold}
}

type valuesFrom struct {
	context.Context
	vals context.Context
}

func (v valuesFrom) Value(k any) any { return v.vals.Value(k) }
