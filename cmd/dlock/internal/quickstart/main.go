// Command quickstart is the README's Quickstart program, kept here so that
// it compiles and its test runs it against a real Redis.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

func main() {
	addr := os.Getenv("REDIS_ADDR") // host:port; default localhost:6379
	if addr == "" {
		addr = "localhost:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := run(context.Background(), rdb); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, rdb redis.UniversalClient) error {
	// One Client per process: it owns the watchdog, one pub/sub connection
	// and, over a plain *redis.Client, up to five connections of its own,
	// which your client's hooks do not see (dlock.WithOwnConnection(false)).
	locks, err := dlock.New(rdb)
	if err != nil {
		return err
	}
	defer locks.Close()

	// The everyday form: wait up to 10s, run fn, always release.
	err = locks.WithLock(ctx, "coupon:42", func(ctx context.Context) error {
		// ctx is cancelled with cause dlock.ErrLockLost if the lock is lost;
		// pass the fencing token to the resource so it can reject stale writers.
		fmt.Println("issuing coupon 42, fencing token", dlock.TokenFrom(ctx))
		return nil
	})
	if errors.Is(err, dlock.ErrWaitTimeout) {
		fmt.Println("coupon 42 is busy: try again later")
	} else if err != nil {
		return err
	}

	// Explicit control, Redisson's tryLock(wait, lease):
	m := locks.Mutex("stock:7")
	ok, err := m.TryLock(ctx, 2*time.Second, 0) // wait <= 0: one attempt; lease <= 0: watchdog
	if err != nil {
		return err
	}
	if !ok {
		fmt.Println("stock:7 is busy")
		return nil
	}
	defer m.Unlock(ctx)
	fmt.Println("holding stock:7, fencing token", m.Token())
	select {
	case <-m.Done():
		return m.Err() // the hold was lost: wraps dlock.ErrLockLost
	default:
		return nil
	}
}
