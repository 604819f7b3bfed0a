package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// serverScenario runs three Clients × two goroutines contending for one
// lock on a server of its own, with holds of lo to hi, plus one poller per
// Client that tries the lock without waiting every 5 ms (so that a lock that
// vanished is taken at once, as a polling service instance would), and calls
// inject while they run; it returns the scenario (shut down) and its stats.
func serverScenario(t *testing.T, name string, watchdog, lo, hi time.Duration, inject func(s *scenario, r *testenv.Redis)) (*scenario, resourceStats, reportRow, time.Time) {
	r := testenv.StartRedis(t)
	s := newScenario(t, name, r)
	var cs []*dlock.Client
	for range 3 {
		cs = append(cs, s.client(r.Addr(), dlock.WithWatchdogTimeout(watchdog), dlock.WithCloseTimeout(time.Second)))
	}
	stop := s.contend(cs, 2, holdOpts{name: "srv", wait: 10 * time.Second}, 7, lo, hi)
	pollStop := make(chan struct{})
	var pollers sync.WaitGroup
	for i, c := range cs {
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			work := randWork(uint64(1000+i), lo, hi)
			for n := 0; ; n++ {
				select {
				case <-pollStop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				_ = s.holdOnce(c, fmt.Sprintf("poller%d#%d", i, n), "srv", work(), dlock.WaitTime(0))
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	inject(s, r)
	after := time.Now()
	time.Sleep(time.Second)
	close(pollStop)
	pollers.Wait()
	stop()
	leaks := s.shutdown()
	row, st := s.row("", leaks)
	if n := s.grantsAfter(after); n == 0 {
		t.Errorf("%s: no grant after the last fault", name)
	}
	return s, st, row, after
}

// Redis killed (SIGKILL) and restarted without persistence under
// contention, twice: every lock, queue and fencing counter is gone. Holders
// inside at the crash may overlap with the next holders on the empty server;
// each such overlap must be caught by fencing (tokens restart from the
// server clock, above every earlier one) and its stale holder told.
func TestFaultRedisRestart(t *testing.T) {
	const faults = "SIGKILL, 300 ms down, restart empty; twice, 700 ms apart; 3 Clients × 2 goroutines, holds 20–200 ms, watchdog 600 ms"
	s, st, row, _ := serverScenario(t, "Redis killed and restarted", 600*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond,
		func(s *scenario, r *testenv.Redis) { s.killAndRestart(r) })
	row.Faults = faults
	row.Notes = fmt.Sprintf("%d lock calls failed while Redis was down", s.errCount("other"))
	record(t, row)
	s.assertFenced(st)
}

// killAndRestart kills r (SIGKILL) and restarts it empty 300 ms later,
// twice, 700 ms apart.
func (s *scenario) killAndRestart(r *testenv.Redis) {
	for i := range 2 {
		if i > 0 {
			time.Sleep(700 * time.Millisecond)
		}
		if err := r.Kill(); err != nil {
			s.t.Fatal(err)
		}
		s.fault("kill")
		time.Sleep(300 * time.Millisecond)
		if err := r.Restart(); err != nil {
			s.t.Fatal(err)
		}
	}
}

// FLUSHALL under contention, twice: the data is gone while Redis runs. As
// for a restart, overlaps must be caught by fencing and their stale holders
// told.
func TestFaultFlushAll(t *testing.T) {
	const faults = "FLUSHALL twice, 700 ms apart; 3 Clients × 2 goroutines, holds 20–200 ms, watchdog 600 ms"
	s, st, row, _ := serverScenario(t, "FLUSHALL", 600*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond,
		func(s *scenario, r *testenv.Redis) {
			for i := range 2 {
				if i > 0 {
					time.Sleep(700 * time.Millisecond)
				}
				if _, err := r.Do(context.Background(), "FLUSHALL"); err != nil {
					t.Fatal(err)
				}
				s.fault("flushall")
			}
		})
	row.Faults = faults
	record(t, row)
	s.assertFenced(st)
}

// SCRIPT FLUSH under contention, five times: the scripts are gone, the data
// is not. Every call meets NOSCRIPT once and loads its script again; nothing
// else may change: no overlap, no stale write, no holder told of a loss.
func TestFaultScriptFlush(t *testing.T) {
	const faults = "SCRIPT FLUSH five times, 200 ms apart; 3 Clients × 2 goroutines, holds 0–5 ms, watchdog 600 ms"
	s, st, row, _ := serverScenario(t, "SCRIPT FLUSH", 600*time.Millisecond, 0, 5*time.Millisecond,
		func(s *scenario, r *testenv.Redis) {
			for range 5 {
				if _, err := r.Do(context.Background(), "SCRIPT", "FLUSH"); err != nil {
					t.Fatal(err)
				}
				s.fault("script flush")
				time.Sleep(200 * time.Millisecond)
			}
		})
	row.Faults = faults
	row.Notes = fmt.Sprintf("%d lock calls failed", s.errCount("other"))
	record(t, row)
	s.assertExclusive(st)
	s.assertNoLoss(st, "when only the scripts were flushed")
	if n := s.errCount("other"); n > 0 {
		t.Errorf("%d lock calls failed after SCRIPT FLUSH", n)
	}
}

// CLIENT PAUSE ALL for a quarter of the watchdog, then for two watchdogs:
// Redis keeps its data and does not expire keys while paused, but nobody's
// calls are answered. A holder whose renewal cannot get through before its
// TTL must be told; no other holder can be granted meanwhile, so there is no
// overlap.
func TestFaultClientPause(t *testing.T) {
	const faults = "CLIENT PAUSE ALL 150 ms, then 1200 ms; 3 Clients × 2 goroutines, holds 20–200 ms, plus one holder inside fn across the long fault, watchdog 600 ms"
	var long time.Time
	var witnessTold <-chan time.Duration
	s, st, row, _ := serverScenario(t, "CLIENT PAUSE", 600*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond,
		func(s *scenario, r *testenv.Redis) {
			ctx := context.Background()
			if _, err := r.Do(ctx, "CLIENT", "PAUSE", "150", "ALL"); err != nil {
				t.Fatal(err)
			}
			s.fault("client pause 150ms")
			time.Sleep(700 * time.Millisecond)
			var entered <-chan struct{}
			entered, witnessTold = witness(s, r)
			<-entered
			if _, err := r.Do(ctx, "CLIENT", "PAUSE", "1200", "ALL"); err != nil {
				t.Fatal(err)
			}
			long = time.Now()
			s.fault("client pause 1200ms")
			time.Sleep(1300 * time.Millisecond)
		})
	row.Faults = faults
	told := <-witnessTold
	row.Notes = fmt.Sprintf("%d contending holders told during the long pause; the holder inside fn across it told after %v", toldBetween(s, long, long.Add(1300*time.Millisecond)), told.Round(time.Millisecond))
	record(t, row)
	s.assertExclusive(st)
	if told < 0 {
		t.Error("the holder inside fn was not told of its loss during a pause of two watchdogs")
	}
}

// DEBUG SLEEP for a quarter of the watchdog, then two watchdogs: the server
// itself stops (like a long GC pause of Redis), and when it wakes the keys
// whose TTL passed are gone. A holder must be told by its own clock during
// the sleep, before anyone can be granted after it: no overlap.
func TestFaultDebugSleep(t *testing.T) {
	const faults = "DEBUG SLEEP 0.15 s, then 1.2 s; 3 Clients × 2 goroutines, holds 20–200 ms, plus one holder inside fn across the long fault, watchdog 600 ms"
	var long time.Time
	var witnessTold <-chan time.Duration
	s, st, row, _ := serverScenario(t, "DEBUG SLEEP", 600*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond,
		func(s *scenario, r *testenv.Redis) {
			ctx := context.Background()
			s.fault("debug sleep 0.15")
			if _, err := r.Do(ctx, "DEBUG", "SLEEP", "0.15"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(700 * time.Millisecond)
			var entered <-chan struct{}
			entered, witnessTold = witness(s, r)
			<-entered
			long = time.Now()
			s.fault("debug sleep 1.2")
			if _, err := r.Do(ctx, "DEBUG", "SLEEP", "1.2"); err != nil {
				t.Fatal(err)
			}
		})
	row.Faults = faults
	told := <-witnessTold
	row.Notes = fmt.Sprintf("%d contending holders told during the long sleep; the holder inside fn across it told after %v", toldBetween(s, long, long.Add(1300*time.Millisecond)), told.Round(time.Millisecond))
	record(t, row)
	s.assertExclusive(st)
	if told < 0 {
		t.Error("the holder inside fn was not told of its loss during a sleep of two watchdogs")
	}
}

// witness holds its own lock across the long fault, inside fn, and reports
// when (and whether) it was told of the loss: a holder whose renewal cannot
// get through before its TTL must be told by its own clock.
func witness(s *scenario, r *testenv.Redis) (entered <-chan struct{}, told <-chan time.Duration) {
	c := s.client(r.Addr(), dlock.WithWatchdogTimeout(600*time.Millisecond), dlock.WithCloseTimeout(time.Second))
	in := make(chan struct{})
	out := make(chan time.Duration, 1)
	go func() {
		_ = c.WithLock(context.Background(), "srv-witness", func(ctx context.Context) error {
			close(in)
			start := time.Now()
			select {
			case <-ctx.Done():
				out <- time.Since(start)
			case <-time.After(3 * time.Second):
				out <- -1
			}
			return nil
		})
	}()
	return in, out
}

// toldBetween counts the holders told of a loss between from and to.
func toldBetween(s *scenario, from, to time.Time) int {
	s.res.mu.Lock()
	defer s.res.mu.Unlock()
	n := 0
	for _, v := range s.res.visits {
		if !v.told.IsZero() && !v.told.Before(from) && v.told.Before(to) {
			n++
		}
	}
	return n
}
