package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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
