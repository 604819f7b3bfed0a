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
			// Slack for a loaded 2-core box; the failures this catches are
			// seconds long.
			const slack = 400 * time.Millisecond
			calls := map[string]func(ctx context.Context) error{
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
			}
			for name, call := range calls {
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				start := time.Now()
				err := call(ctx)
				took := time.Since(start)
				cancel()
				if err == nil {
					t.Errorf("%s against a %s Redis succeeded", name, target.name)
				}
				if took > budget+slack {
					t.Errorf("%s with a %v ctx returned after %v (err %v)", name, budget, took, err)
				}
			}
			// The wait bounds the whole call too, network time included.
			start := time.Now()
			ok, err := c.Mutex("law").TryLock(context.Background(), 300*time.Millisecond, 0)
			if took := time.Since(start); ok || took > 300*time.Millisecond+slack || !errors.Is(err, ErrUnavailable) {
				t.Errorf("TryLock with a 300ms wait = %v, %v after %v; want ErrUnavailable within the wait", ok, err, took)
			}
			start = time.Now()
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if took := time.Since(start); took > 500*time.Millisecond+slack {
				t.Errorf("Close took %v with a 500ms close timeout", took)
			}
		})
	}
}
