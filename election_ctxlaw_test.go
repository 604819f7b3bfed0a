package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// Election's calls honour ctx against a Redis that accepts and never
// answers: each returns, and Observe's channel closes, within moments of
// ctx's end.
func TestElectionContextIsLaw(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: silentServer(t),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { rdb.Close() })
	c, err := New(rdb, WithCloseTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const budget, slack = 100 * time.Millisecond, 400 * time.Millisecond
	e := c.Election("el:law")
	calls := map[string]func(ctx context.Context) error{
		"Campaign": func(ctx context.Context) error { _, err := e.Campaign(ctx, "v"); return err },
		"Leader":   func(ctx context.Context) error { _, err := e.Leader(ctx); return err },
		"Observe": func(ctx context.Context) error {
			for range e.Observe(ctx) {
			}
			return ctx.Err()
		},
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		start := time.Now()
		err := call(ctx)
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Errorf("%s: nil error against a silent server", name)
		}
		if took > budget+slack {
			t.Errorf("%s took %v with a %v ctx", name, took, budget)
		}
	}
}

// The same on a Cluster, where Observe listens through sharded pub/sub:
// with every master frozen (it accepts and never answers), the observer's
// channel closes within moments of ctx's end, not after the Cluster
// client's timeouts, which closing the sharded subscriber waits for.
func TestElectionObserveShardedContextIsLaw(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(),
		DialTimeout: 20 * time.Second, ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { cc.Close() })
	c := newClientOn(t, cc)
	ctx := ctxT(t)
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes() {
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Resume() })
	}
	const budget, slack = 200 * time.Millisecond, time.Second
	octx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	start := time.Now()
	for range c.Election("el:sharded-law").Observe(octx) {
	}
	if took := time.Since(start); took > budget+slack {
		t.Errorf("Observe's channel closed %v after it began, with a %v ctx", took, budget)
	}
	for _, n := range cl.Nodes() {
		_ = n.Resume()
	}
}
