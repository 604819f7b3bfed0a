package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsyncRetryDelay is redsync's fixed delay between tries. Its default is a
// random 50-250 ms, far too slow for a 5 ms critical section; 5 ms matches
// the spin-5ms variant and the hold time. Changed by -redsync-delay.
var redsyncRetryDelay = 5 * time.Millisecond

const redsyncExpiry = 8 * time.Second

type redsyncLib struct{}

func init() { register(redsyncLib{}) }

func (redsyncLib) Name() string   { return "redsync" }
func (redsyncLib) Module() string { return "github.com/go-redsync/redsync/v4" }
func (redsyncLib) Settings() string {
	return fmt.Sprintf("one goredis/v9 pool (go-redis defaults), NewMutex per acquisition with WithExpiry(%v), WithTries(math.MaxInt32) (the run's context deadline bounds the wait), WithRetryDelay(%v) (fixed; default is random 50-250ms)", redsyncExpiry, redsyncRetryDelay)
}

func (redsyncLib) NewClient(addr string) (Client, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	return &redsyncClient{rdb: rdb, rs: redsync.New(goredis.NewPool(rdb)), delay: redsyncRetryDelay}, nil
}

type redsyncClient struct {
	rdb   *redis.Client
	rs    *redsync.Redsync
	delay time.Duration
}

func (c *redsyncClient) Acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	// A redsync.Mutex carries the owner value of one acquisition, so it is
	// created per acquisition (sharing one between goroutines would race).
	m := c.rs.NewMutex(key,
		redsync.WithExpiry(redsyncExpiry),
		redsync.WithTries(math.MaxInt32),
		redsync.WithRetryDelay(c.delay),
	)
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("redsync: %w (%v)", ctx.Err(), err)
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("redsync: unlock failed")
		}
		return nil
	}, nil
}

func (c *redsyncClient) Close() error { return c.rdb.Close() }

// Ping implements Pinger, through the client the locks use.
func (c *redsyncClient) Ping(ctx context.Context) error { return c.rdb.Ping(ctx).Err() }
