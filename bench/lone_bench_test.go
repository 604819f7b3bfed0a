//go:build !nodlock

package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

// BenchmarkLonePair is issue 31's one-goroutine profile in one binary: a
// dlock Lock+Unlock pair (a new handle per pair, a cancellable ctx, as a
// request's) against go-redis sending a lock's minimum (SET NX PX, then
// the compare-and-delete script) through redis.Client.Do on the same
// server. Run with -benchmem and -cpuprofile: allocs/op is the allocations
// of one pair, and the profile shows what dlock's Go code adds.
//
//	go test -run '^$' -bench LonePair -benchmem -count 6 -cpuprofile cpu.out
func BenchmarkLonePair(b *testing.B) {
	srv := startTestRedis(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("lib=dlock", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.dialAddr()})
		defer rdb.Close()
		c, err := dlock.New(rdb)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		warm(b, func() error { return pair(ctx, c) })
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if err := pair(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lib=go-redis", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.dialAddr()})
		defer rdb.Close()
		do := func() error {
			if err := rdb.Do(ctx, "set", "bench:lone", "token", "nx", "px", 30000).Err(); err != nil {
				return err
			}
			return compareAndDelete.Run(ctx, rdb, []string{"bench:lone"}, "token").Err()
		}
		warm(b, do)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if err := do(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func pair(ctx context.Context, c *dlock.Client) error {
	m := c.Mutex("bench:lone")
	if err := m.Lock(ctx); err != nil {
		return err
	}
	return m.Unlock(ctx)
}

// warm runs f until scripts are loaded and dlock's own connection is
// ready (it is dialed in the background after the first call).
func warm(b *testing.B, f func() error) {
	for range 200 {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	for range 200 {
		if err := f(); err != nil {
			b.Fatal(err)
		}
	}
}
