package dlock

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkUncontended measures acquire+release pairs on distinct keys.
func BenchmarkUncontended(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			c := newClient(b, shared)
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(max(g/2, 1)) // GOMAXPROCS is 2 here
			b.RunParallel(func(pb *testing.PB) {
				m := c.Mutex(fmt.Sprintf("bench:u:%d", next.Add(1)))
				for pb.Next() {
					if err := m.Lock(ctx); err != nil {
						b.Error(err)
						return
					}
					if err := m.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkUncontendedNewHandle is BenchmarkUncontended written the way
// users write it: a new handle per acquisition (c.Mutex(name).Lock(ctx) …
// Unlock), and a ctx that can be cancelled, as a request's is. Its
// allocs/op are the allocations of one acquire+release pair.
func BenchmarkUncontendedNewHandle(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			c := newClient(b, shared)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(max(g/2, 1)) // GOMAXPROCS is 2 here
			b.RunParallel(func(pb *testing.PB) {
				name := fmt.Sprintf("bench:n:%d", next.Add(1))
				for pb.Next() {
					m := c.Mutex(name)
					if err := m.Lock(ctx); err != nil {
						b.Error(err)
						return
					}
					if err := m.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkHotKey has W goroutines, each with its own Client (a process of
// its own, as far as Redis can tell), take one Mutex in turn and hold it for
// 1ms. It reports Redis commands per grant (Lua-internal calls included) and
// the hand-off gap between a release and the next grant.
func BenchmarkHotKey(b *testing.B) { benchHotKey(b, hotMutex) }

// BenchmarkHotKeyFair is BenchmarkHotKey with a FairMutex.
func BenchmarkHotKeyFair(b *testing.B) { benchHotKey(b, hotFair) }

// BenchmarkHotKeySpin is BenchmarkHotKey in spin mode (WithSpin(1ms, 128ms)):
// polling instead of pub/sub and hand-off.
func BenchmarkHotKeySpin(b *testing.B) { benchHotKey(b, hotSpin) }

type hotMode int

const (
	hotMutex hotMode = iota
	hotFair
	hotSpin
)

func benchHotKey(b *testing.B, mode hotMode) {
	for _, w := range []int{10, 100} {
		b.Run(fmt.Sprintf("waiters=%d", w), func(b *testing.B) {
			r := testenvRedis(b)
			ctx := context.Background()
			clients := make([]*Client, w)
			var opts []Option
			if mode == hotSpin {
				opts = append(opts, WithSpin(time.Millisecond, 128*time.Millisecond))
			}
			for i := range clients {
				clients[i] = newClient(b, r, opts...)
			}
			var mu sync.Mutex
			var lastRelease time.Time
			var gaps []time.Duration
			var grants atomic.Int64
			total := int64(b.N)
			if err := r.ResetStats(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var m Locker = c.Mutex("bench:hot")
					if mode == hotFair {
						m = c.FairMutex("bench:hot")
					}
					for grants.Add(1) <= total {
						if err := m.Lock(ctx); err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						if !lastRelease.IsZero() {
							gaps = append(gaps, time.Since(lastRelease))
						}
						mu.Unlock()
						time.Sleep(time.Millisecond)
						mu.Lock()
						lastRelease = time.Now()
						mu.Unlock()
						if err := m.Unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			stats, err := r.CommandStats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var cmds int64
			for name, n := range stats {
				if name != "config|resetstat" && name != "info" {
					cmds += n
				}
			}
			b.ReportMetric(float64(cmds)/float64(b.N), "cmds/grant")
			if len(gaps) > 0 {
				sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
				b.ReportMetric(float64(gaps[len(gaps)/2].Microseconds()), "gap-p50-µs")
				b.ReportMetric(float64(gaps[len(gaps)*99/100].Microseconds()), "gap-p99-µs")
			}
		})
	}
}

// BenchmarkPing is the round trip the uncontended benchmarks compare with:
// one PING through the same kind of client, one goroutine.
func BenchmarkPing(b *testing.B) {
	rdb := rdbFor(b, shared)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
