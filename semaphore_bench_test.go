package dlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// Semaphore cost under contention: 2 permits, 16 goroutines in 4 Clients
// (4 processes' worth of connections) taking a permit, holding it for
// 200µs and giving it back, b.N grants in all. It reports Redis commands
// per grant (INFO commandstats) and Redis main-thread CPU per grant (INFO
// cpu: used_cpu_user_main_thread + used_cpu_sys_main_thread), for dlock's
// Semaphore and for the polling semaphore people write by hand (a sorted
// set of holders: MULTI ZREMRANGEBYSCORE/ZADD/PEXPIRE/ZRANK, and on failure
// ZREM, sleep and try again; with sleeps of 0.1-1ms and of 1-10ms).
//
//	go test -run '^$' -bench SemaphoreContended -benchtime 3000x .
func BenchmarkSemaphoreContended(b *testing.B) {
	const permits, clients, perClient = 2, 4, 4
	const hold = 200 * time.Microsecond
	b.Run("dlock", func(b *testing.B) {
		r := testenv.StartRedis(b)
		var sems []*Semaphore
		for range clients {
			c := newClient(b, r)
			sems = append(sems, c.Semaphore("bench:sem", permits))
		}
		semContend(b, r, clients*perClient, []string{"evalsha", "eval"}, func(i int) func(context.Context) error {
			s := sems[i%clients]
			return func(ctx context.Context) error {
				p, err := s.Acquire(ctx, time.Minute, 0)
				if err != nil {
					return err
				}
				time.Sleep(hold)
				return p.Release(ctx)
			}
		})
	})
	for _, poll := range []time.Duration{time.Millisecond, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("polling-%v", poll), func(b *testing.B) { pollingBench(b, poll) })
	}
}

func pollingBench(b *testing.B, poll time.Duration) {
	const permits, clients, perClient = 2, 4, 4
	const hold = 200 * time.Microsecond
	{
		r := testenv.StartRedis(b)
		var rdbs []*redis.Client
		for range clients {
			rdbs = append(rdbs, rdbFor(b, r))
		}
		var ids atomic.Int64
		semContend(b, r, clients*perClient, []string{"multi", "zrem"}, func(i int) func(context.Context) error {
			rdb := rdbs[i%clients]
			return func(ctx context.Context) error {
				id := strconv.FormatInt(ids.Add(1), 10)
				if err := pollAcquire(ctx, rdb, "bench:polling", id, permits, 30*time.Second, poll); err != nil {
					return err
				}
				time.Sleep(hold)
				return rdb.ZRem(ctx, "bench:polling", id).Err()
			}
		})
	}
}

// pollAcquire is the hand-made polling semaphore: after a failed attempt it
// sleeps between poll/10 and poll.
func pollAcquire(ctx context.Context, rdb *redis.Client, key, id string, n int64, ttl, poll time.Duration) error {
	for {
		now := time.Now()
		var rank *redis.IntCmd
		_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(now.Add(-ttl).UnixMilli(), 10))
			p.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMilli()), Member: id})
			p.PExpire(ctx, key, ttl)
			rank = p.ZRank(ctx, key, id)
			return nil
		})
		if err != nil {
			return err
		}
		if rank.Val() < n {
			return nil
		}
		if err := rdb.ZRem(ctx, key, id).Err(); err != nil {
			return err
		}
		select {
		case <-time.After(poll/10 + rand.N(poll*9/10)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// semContend runs b.N grants over workers goroutines and reports the server's
// cost per grant: every command Redis ran (commands inside scripts and
// transactions included), the client's round trips (the commands named in
// calls: EVALSHA, or MULTI blocks and lone ZREMs), and main-thread CPU.
func semContend(b *testing.B, r *testenv.Redis, workers int, calls []string, mk func(i int) func(context.Context) error) {
	ctx := context.Background()
	// One warm-up grant per worker: scripts loaded, connections open.
	var wg sync.WaitGroup
	fns := make([]func(context.Context) error, workers)
	for i := range workers {
		fns[i] = mk(i)
		if err := fns[i](ctx); err != nil {
			b.Fatal(err)
		}
	}
	if err := r.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}
	cpu0 := mainThreadCPU(b, r)
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := fns[i](ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := mainThreadCPU(b, r) - cpu0
	stats, err := r.CommandStats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for k, v := range stats {
		if k != "info" && k != "config|resetstat" {
			total += v
		}
	}
	var trips int64
	for _, k := range calls {
		trips += stats[k]
	}
	b.ReportMetric(float64(total)/float64(b.N), "cmds/grant")
	b.ReportMetric(float64(trips)/float64(b.N), "calls/grant")
	b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), "redis-cpu-µs/grant")
	b.Logf("%d grants: %v", b.N, stats)
}

// mainThreadCPU is Redis' main-thread CPU time so far.
func mainThreadCPU(b *testing.B, r *testenv.Redis) time.Duration {
	info, err := r.Info(context.Background(), "cpu")
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, k := range []string{"used_cpu_user_main_thread", "used_cpu_sys_main_thread"} {
		v, err := strconv.ParseFloat(info[k], 64)
		if err != nil {
			b.Fatalf("INFO cpu has no %s: %v", k, info)
		}
		sum += v
	}
	return time.Duration(sum * float64(time.Second))
}
