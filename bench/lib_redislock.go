package main

import (
	"context"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// redislockBackoff is the fixed retry interval given to redislock's
// LinearBackoff. Its README suggests ExponentialBackoff(16ms, ...), whose
// first steps are 16, 16, 16, 32, 64 ms: under a 5 ms critical section that
// only measures the backoff, so a linear 5 ms (same as spin-5ms and
// redsync) is used. Changed by -redislock-backoff.
var redislockBackoff = 5 * time.Millisecond

const redislockTTL = 8 * time.Second

type redislockLib struct{}

func init() { register(redislockLib{}) }

func (redislockLib) Name() string   { return "redislock" }
func (redislockLib) Module() string { return "github.com/bsm/redislock" }
func (redislockLib) Settings() string {
	return fmt.Sprintf("Obtain(ctx, key, ttl %v, RetryStrategy: LinearBackoff(%v)); the run's context deadline bounds the wait; go-redis client defaults", redislockTTL, redislockBackoff)
}

func (redislockLib) NewClient(addr string) (Client, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	return &redislockClient{rdb: rdb, lc: redislock.New(rdb), opts: &redislock.Options{RetryStrategy: redislock.LinearBackoff(redislockBackoff)}}, nil
}

type redislockClient struct {
	rdb  *redis.Client
	lc   *redislock.Client
	opts *redislock.Options
}

func (c *redislockClient) Acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	// LinearBackoff is stateless, so one Options value is shared.
	l, err := c.lc.Obtain(ctx, key, redislockTTL, c.opts)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (c *redislockClient) Close() error { return c.rdb.Close() }

// Ping implements Pinger, through the client the locks use.
func (c *redislockClient) Ping(ctx context.Context) error { return c.rdb.Ping(ctx).Err() }
