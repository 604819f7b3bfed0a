package dlock

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// silentServer is a Redis that accepts and never answers, like a
// partitioned or hung one.
func silentServer(t testing.TB) string { return testenv.NewSilentServer(t).Addr() }

// refusedAddr is a loopback address where nothing listens.
func refusedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A caller's ctx is law: with a 100ms ctx, every call returns within moments
// of it, whether Redis refuses connections or accepts and never answers
// (go-redis alone would keep a call for its dial or read timeout times its
// retries: 1.8s and 10s). Close stays within its timeout.
func TestContextIsLaw(t *testing.T) {
	for _, target := range []struct {
		name string
		addr func(testing.TB) string
	}{{"refused", refusedAddr}, {"silent", silentServer}} {
		t.Run(target.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: target.addr(t),
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
			t.Cleanup(func() { rdb.Close() })
			c, err := New(rdb, WithCloseTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			const budget = 100 * time.Millisecond
			checkLaw(t, target.name, budget, lawCalls(c))
			// The wait bounds the whole call too, network time included.
			start := time.Now()
			ok, err := c.Mutex("law").TryLock(context.Background(), 300*time.Millisecond, 0)
			if took := time.Since(start); ok || took > 300*time.Millisecond+lawSlack || !errors.Is(err, ErrUnavailable) {
				t.Errorf("TryLock with a 300ms wait = %v, %v after %v; want ErrUnavailable within the wait", ok, err, took)
			}
			start = time.Now()
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if took := time.Since(start); took > 500*time.Millisecond+lawSlack {
				t.Errorf("Close took %v with a 500ms close timeout", took)
			}
		})
	}
}

// lawSlack is the slack a call gets past its ctx on a loaded 2-core box;
// the failures the ctx tests catch are seconds long.
const lawSlack = 400 * time.Millisecond

// lawCalls are the calls the ctx tests make, each of which must fail
// against a Redis that cannot answer.
func lawCalls(c *Client) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"Lock": func(ctx context.Context) error { return c.Mutex("law").Lock(ctx) },
		"TryLock": func(ctx context.Context) error {
			_, err := c.Mutex("law").TryLock(ctx, 10*time.Second, 0)
			return err
		},
		"TryLock no wait": func(ctx context.Context) error {
			_, err := c.Mutex("law").TryLock(ctx, 0, 0)
			return err
		},
		"WithLock": func(ctx context.Context) error {
			return c.WithLock(ctx, "law", func(context.Context) error { return nil })
		},
		"FairMutex": func(ctx context.Context) error { return c.FairMutex("law:fair").Lock(ctx) },
		"RLock":     func(ctx context.Context) error { return c.RWMutex("law:rw").RLock(ctx) },
		"RWMutex":   func(ctx context.Context) error { return c.RWMutex("law:rw").Lock(ctx) },
		"MultiLock": func(ctx context.Context) error {
			return c.MultiLock(c.Mutex("law:a"), c.Mutex("law:b")).Lock(ctx)
		},
		"Inspect":     func(ctx context.Context) error { _, err := c.Inspect(ctx, "law"); return err },
		"IsLocked":    func(ctx context.Context) error { _, err := c.Mutex("law").IsLocked(ctx); return err },
		"ForceUnlock": func(ctx context.Context) error { _, err := c.Mutex("law").ForceUnlock(ctx); return err },
		"Campaign":    func(ctx context.Context) error { _, err := c.Election("law:el").Campaign(ctx, "v"); return err },
		"Leader":      func(ctx context.Context) error { _, err := c.Election("law:el").Leader(ctx); return err },
		// Observe's channel closes once ctx ends (its subscription is
		// closed in the background).
		"Observe": func(ctx context.Context) error {
			for range c.Election("law:el").Observe(ctx) {
			}
			return ctx.Err()
		},
	}
}

// checkLaw runs each call with a ctx of budget and reports those that
// succeeded or outlived their ctx.
func checkLaw(t *testing.T, target string, budget time.Duration, calls map[string]func(ctx context.Context) error) {
	t.Helper()
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		start := time.Now()
		err := call(ctx)
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Errorf("%s against a %s Redis succeeded", name, target)
		}
		if took > budget+lawSlack {
			t.Errorf("%s with a %v ctx returned after %v (err %v)", name, budget, took, err)
		}
	}
}

// The same on a Cluster whose masters all freeze (they accept and never
// answer) after the Client has learned the topology and subscribed: the
// sharded subscriber, the Cluster client's redirects and its slot reloads
// must not hold a call past its ctx. The Cluster client's own timeouts are
// a minute, so a call that waits for one fails the test.
func TestContextIsLawOnAFrozenCluster(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(),
		DialTimeout: time.Minute, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { cc.Close() })
	checkLawFrozen(t, cc, "frozen Cluster", func() {
		for _, n := range cl.Nodes() {
			if err := n.Pause(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Resume() })
		}
	}, func() {
		for _, n := range cl.Nodes() {
			_ = n.Resume()
		}
	})
}

// The same through Sentinel: the primary freezes after the Client has found
// it and subscribed (no replica to fail over to), with the failover
// client's own timeouts a minute.
func TestContextIsLawOnAFrozenSentinelPrimary(t *testing.T) {
	primary := testenvRedis(t)
	sentinel := testenv.StartSentinel(t, primary)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.MasterName, SentinelAddrs: []string{sentinel.Addr()},
		DialTimeout: time.Minute, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { rdb.Close() })
	checkLawFrozen(t, rdb, "frozen Sentinel primary", func() {
		if err := primary.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = primary.Resume() })
	}, func() { _ = primary.Resume() })
}

// checkLawFrozen takes a lock through a Client on rdb (so that it has
// subscribed and learned the topology), calls freeze, then checks the ctx
// tests' calls, an Unlock of that lock and the other kinds' waits, and
// Close's budget, before thaw.
func checkLawFrozen(t *testing.T, rdb redis.UniversalClient, target string, freeze, thaw func()) {
	t.Helper()
	c, err := New(rdb, WithCloseTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	held := c.Mutex("law:held")
	if err := held.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	freeze()
	calls := lawCalls(c)
	calls["Unlock"] = func(ctx context.Context) error { return held.Unlock(ctx) }
	calls["Semaphore"] = func(ctx context.Context) error {
		_, err := c.Semaphore("law:sem", 1).Acquire(ctx, 10*time.Second, 0)
		return err
	}
	calls["Latch"] = func(ctx context.Context) error { return c.CountDownLatch("law:latch").Wait(ctx) }
	calls["Locks"] = func(ctx context.Context) error { _, err := c.Locks(ctx, "law*"); return err }
	checkLaw(t, target, 100*time.Millisecond, calls)
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond+lawSlack {
		t.Errorf("Close took %v with a 500ms close timeout", took)
	}
	thaw()
}
