package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkColdCall measures what a command costs Redis when it is the only
// one in a while (a hand-off after a 5 ms hold, a request arriving in a
// quiet service) against the same command back to back: Redis's own time
// per call from INFO commandstats (usec over calls), so the client's share
// and the round trip are left out. The shapes are a plain SET, an empty
// script, the peers' compare-and-delete (two redis.calls), and scripts of
// four and eight redis.calls (dlock's uncontended acquire and a pair's
// worth). On the 2-vCPU AMD EPYC host of 2026-11-28 (quiet, two runs; a
// PING took 39-44 µs in the scaling run that followed), cold
// against back to back: SET 12-13 µs against 0.6-1; an empty script 31-32
// against 3.5-4.5; compare-and-delete 37-39 against 4-5.6; four
// redis.calls 78-81 against 8.4-9.3 (about 12 µs each over the empty
// script); eight 100-102 against 13 (the next four about 5 µs each, the
// script warming as it runs). On such a host the redis.calls on a cold
// path, not its Lua, are most of what it costs Redis.
//
// redis-cpu-µs/call is the rest of the bill: Redis's main-thread CPU (INFO
// cpu) per call, the read, the reply's write and the wake-up from
// epoll_wait included, and with a gap the idle server's own ticks too
// (about 8 µs per 5 ms here). On the 2-vCPU Intel Xeon host of 2026-11-28
// (PING about 25 µs): a PING costs Redis 14 µs back to back and 61 µs
// after 5 ms of quiet, a script of eight redis.calls 31 against 89. A
// server that sleeps between calls pays a wake-up of about 45 µs at
// every one, which no script can save: it is why a hand-off every 5 ms
// costs Redis more per request here than a poller's request that finds
// Redis awake (bench/JOURNAL.md, "Fifth session of 2026-11-28").
//
//	go test -run '^$' -bench ColdCall -benchtime 300x .
func BenchmarkColdCall(b *testing.B) {
	srv := startTestRedis(b)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.dialAddr()})
	defer rdb.Close()
	keys := []string{"{c}h", "{c}n", "{c}q"}
	shapes := []struct {
		name, cmd string
		run       func() error
	}{
		{"ping", "ping", func() error { return rdb.Ping(ctx).Err() }},
		{"set", "set", func() error { return rdb.Set(ctx, "{c}s", "v", 0).Err() }},
		{"script=empty", "evalsha", script(ctx, rdb, keys, `return 1`)},
		{"script=get+del", "evalsha", func() error { return compareAndDelete.Run(ctx, rdb, keys[:1], "t").Err() }},
		{"script=4calls", "evalsha", script(ctx, rdb, keys, `redis.call('pttl', KEYS[1])
redis.call('hset', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], 30000)
return redis.call('incr', KEYS[2])`)},
		{"script=8calls", "evalsha", script(ctx, rdb, keys, `redis.call('pttl', KEYS[1])
redis.call('hset', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], 30000)
redis.call('incr', KEYS[2])
redis.call('hget', KEYS[1], ARGV[1])
redis.call('lpop', KEYS[3])
redis.call('del', KEYS[1])
return redis.call('publish', 'bench:cold', '0')`)},
	}
	for _, gap := range []time.Duration{0, 5 * time.Millisecond} {
		for _, s := range shapes {
			b.Run(fmt.Sprintf("gap=%v/%s", gap, s.name), func(b *testing.B) {
				if err := s.run(); err != nil { // loads the script
					b.Fatal(err)
				}
				if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				cpu0, err := mainThreadCPU(ctx, rdb)
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if err := s.run(); err != nil {
						b.Fatal(err)
					}
					if gap > 0 {
						time.Sleep(gap)
					}
				}
				cpu1, err := mainThreadCPU(ctx, rdb)
				if err != nil {
					b.Fatal(err)
				}
				us, err := commandUsec(ctx, rdb, s.cmd)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(us, "redis-µs/call")
				// Everything the call cost Redis's main thread: its
				// command, and the read, the reply's write and the wake-up
				// from epoll_wait around it (two INFO calls' worth more).
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/call")
			})
		}
	}
}

// script returns a func that runs src by EVALSHA on keys.
func script(ctx context.Context, rdb *redis.Client, keys []string, src string) func() error {
	s := redis.NewScript(src)
	return func() error {
		err := s.Run(ctx, rdb, keys, "owner").Err()
		if err == redis.Nil {
			return nil
		}
		return err
	}
}

// mainThreadCPU reads the CPU time of Redis's main thread from INFO cpu.
func mainThreadCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	return parseMainThreadCPU(info)
}

// commandUsec reads Redis's time per call of cmd from INFO commandstats.
func commandUsec(ctx context.Context, rdb *redis.Client, cmd string) (float64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	prefix := "cmdstat_" + cmd + ":"
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
		if !ok {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in INFO commandstats", cmd)
}
