package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// spinLib is the hand-made loop the project seeds used before dlock:
//
//	SET key token NX PX 30000   until OK, sleeping a fixed backoff between tries
//	EVAL compare-and-delete     to release
//
// Two variants are registered: 1 ms and 5 ms backoff.
type spinLib struct {
	backoff time.Duration
}

const spinTTL = 30 * time.Second

func init() {
	register(spinLib{backoff: time.Millisecond})
	register(spinLib{backoff: 5 * time.Millisecond})
}

func (l spinLib) Name() string   { return fmt.Sprintf("spin-%dms", l.backoff/time.Millisecond) }
func (l spinLib) Module() string { return "github.com/redis/go-redis/v9" }
func (l spinLib) Settings() string {
	return fmt.Sprintf("SET key token NX PX %d until OK, fixed sleep %v between tries; release = compare-and-delete Lua (EVALSHA); go-redis client defaults", spinTTL.Milliseconds(), l.backoff)
}

func (l spinLib) NewClient(addr string) (Client, error) {
	return &spinClient{rdb: redis.NewClient(&redis.Options{Addr: addr}), backoff: l.backoff}, nil
}

// compareAndDelete is the seeds' release script.
var compareAndDelete = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

type spinClient struct {
	rdb     *redis.Client
	backoff time.Duration
}

func (c *spinClient) Acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	token := randomToken()
	var timer *time.Timer
	for {
		ok, err := c.rdb.SetNX(ctx, key, token, spinTTL).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
		if timer == nil {
			timer = time.NewTimer(c.backoff)
		} else {
			timer.Reset(c.backoff)
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
	return func(ctx context.Context) error {
		n, err := compareAndDelete.Run(ctx, c.rdb, []string{key}, token).Int64()
		if err != nil {
			return err
		}
		if n != 1 {
			return errors.New("spin: lock was not held at release")
		}
		return nil
	}, nil
}

func (c *spinClient) Close() error { return c.rdb.Close() }

// Ping implements Pinger, through the client the locks use.
func (c *spinClient) Ping(ctx context.Context) error { return c.rdb.Ping(ctx).Err() }
