package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// randWork returns a work-duration function drawing uniformly from [lo, hi)
// with a fixed seed.
func randWork(seed uint64, lo, hi time.Duration) func() time.Duration {
	rng := rand.New(rand.NewPCG(seed, 13))
	return func() time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
}

// Connection resets under contention: three Clients, each behind its own
// proxy, two goroutines each, take one lock over and over while one Client's
// connections (commands and pub/sub alike) are reset every 100ms. go-redis
// redials and resends; every script is safe to resend. Redis keeps its data,
// so there must be no overlap, no stale write, no leak, and no holder told of
// a loss it did not suffer.
func TestFaultConnectionResets(t *testing.T) {
	r := testenv.StartRedis(t)
	s := newScenario(t, "connection resets", r)
	const clients, perClient = 3, 2
	var proxies []*testenv.FaultProxy
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		p := s.proxy(r.Addr())
		proxies = append(proxies, p)
		c := s.client(p.Addr(), dlock.WithWatchdogTimeout(600*time.Millisecond))
		for g := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.withLockLoop(c, fmt.Sprintf("c%d/g%d", i, g), holdOpts{name: "hot", work: randWork(uint64(i*10+g), 0, 3*time.Millisecond)}, stop)
			}()
		}
	}
	time.Sleep(300 * time.Millisecond)
	resets := 0
	for i := range 30 {
		resets += proxies[i%clients].Reset()
		s.fault("reset")
		time.Sleep(100 * time.Millisecond)
	}
	healed := time.Now()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	leaks := s.shutdown()
	row, st := s.row("RST of one Client's connections every 100 ms, 3 s, 3 Clients × 2 goroutines, watchdog 600 ms", leaks)
	row.Notes = fmt.Sprintf("%d connections reset; %d lock calls failed", resets, s.errCount("other"))
	record(t, row)
	s.assertExclusive(st)
	s.assertNoLoss(st, "while Redis kept every lock")
	if n := s.grantsAfter(healed); n == 0 {
		t.Error("no grant after the resets stopped")
	}
	if st.grants < 50 {
		t.Errorf("only %d grants in 3.6 s", st.grants)
	}
}

// A holder cut off from Redis (its proxy blackholes: no byte goes through,
// connections stay open) past its TTL must be told of the loss before the
// next holder is granted. Each of five rounds records when the partitioned
// holder's context was cancelled and when the waiter (on a healthy
// connection) got the lock; the margin between the two is reported. After the
// partition heals, the holder's delayed renewal and release reach Redis late
// and must not disturb the new holder.
func TestFaultPartitionPastTTL(t *testing.T) {
	r := testenv.StartRedis(t)
	s := newScenario(t, "partition past the TTL", r)
	const watchdog = 600 * time.Millisecond
	p := s.proxy(r.Addr())
	a := s.client(p.Addr(), dlock.WithWatchdogTimeout(watchdog), dlock.WithCloseTimeout(time.Second))
	b := s.client(r.Addr(), dlock.WithWatchdogTimeout(watchdog))
	var margins []time.Duration
	for round := range 5 {
		name := fmt.Sprintf("part:%d", round)
		entered := make(chan struct{})
		var toldAt, grantedAt time.Time
		aDone := make(chan error, 1)
		go func() {
			var v *visit
			err := a.WithLock(context.Background(), name, func(ctx context.Context) error {
				v = s.res.enter("partitioned", dlock.TokenFrom(ctx), false)
				close(entered)
				select {
				case <-ctx.Done():
					toldAt = time.Now()
					if cause := context.Cause(ctx); errors.Is(cause, dlock.ErrLockLost) {
						s.res.tell(v, toldAt, cause)
					}
				case <-time.After(20 * time.Second):
				}
				s.res.leave(v)
				return nil
			})
			if errors.Is(err, dlock.ErrLockLost) {
				s.res.tell(v, time.Now(), err)
			}
			aDone <- err
		}()
		<-entered
		bDone := make(chan error, 1)
		go func() {
			err := b.WithLock(context.Background(), name, func(ctx context.Context) error {
				grantedAt = time.Now()
				s.res.leave(s.res.enter("waiter", dlock.TokenFrom(ctx), false))
				return nil
			}, dlock.WaitTime(10*time.Second))
			s.callErr(err)
			bDone <- err
		}()
		time.Sleep(watchdog / 2) // the waiter is queued; the holder renewed at least once
		p.Blackhole()
		s.fault("blackhole")
		if err := <-bDone; err != nil {
			t.Fatalf("round %d: waiter: %v", round, err)
		}
		if err := p.Heal(); err != nil {
			t.Fatal(err)
		}
		err := <-aDone
		if toldAt.IsZero() {
			t.Fatalf("round %d: the partitioned holder was never told (WithLock returned %v)", round, err)
		}
		margin := grantedAt.Sub(toldAt)
		margins = append(margins, margin)
		if margin <= 0 {
			t.Errorf("round %d: the next holder was granted %v before the partitioned holder was told", round, -margin)
		}
		// The holder's delayed calls have reached Redis: the lock is free
		// or held by nobody stale.
		info, err := b.Inspect(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if info.Locked {
			t.Errorf("round %d: %s still locked after both holders left: %+v", round, name, info)
		}
	}
	leaks := s.shutdown()
	row, st := s.row("one Client blackholed past its TTL (5 rounds, watchdog 600 ms), the waiter on a healthy connection", leaks)
	lo, hi := margins[0], margins[0]
	for _, m := range margins {
		lo, hi = min(lo, m), max(hi, m)
	}
	row.Notes = fmt.Sprintf("partitioned holder told %v to %v before the next grant", lo.Round(10*time.Microsecond), hi.Round(10*time.Microsecond))
	record(t, row)
	s.assertExclusive(st)
	if st.told != 5 {
		t.Errorf("%d of 5 partitioned holders told", st.told)
	}
}

// Latency just under a third of the watchdog on every Client's connections
// (each direction 45% of a third, so a round trip takes 90% of the renewal
// period), from the first connection on: acquisitions take several round
// trips (connection handshake, NOSCRIPT then EVAL), renewals arrive late in
// their period. Nothing is lost: no overlap, no holder told of a loss.
func TestFaultLatencyUnderRenewalPeriod(t *testing.T) {
	r := testenv.StartRedis(t)
	s := newScenario(t, "latency under a third of the watchdog", r)
	const watchdog = 900 * time.Millisecond
	oneWay := watchdog / 3 * 45 / 100
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		p := s.proxy(r.Addr())
		p.SetLatency(oneWay, oneWay)
		c := s.client(p.Addr(), dlock.WithWatchdogTimeout(watchdog))
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.withLockLoop(c, fmt.Sprintf("c%d/g%d", i, g), holdOpts{name: "slow", work: randWork(uint64(i*10+g), 50*time.Millisecond, watchdog), wait: 20 * time.Second}, stop)
			}()
		}
	}
	s.fault("latency")
	time.Sleep(4 * time.Second)
	close(stop)
	wg.Wait()
	leaks := s.shutdown()
	row, st := s.row(fmt.Sprintf("%v each way on every connection from the start (round trip %v, watchdog %v), 3 Clients × 2 goroutines, holds up to a watchdog", oneWay, 2*oneWay, watchdog), leaks)
	record(t, row)
	s.assertExclusive(st)
	s.assertNoLoss(st, "while every renewal arrived within its period")
	if st.grants < 5 {
		t.Errorf("only %d grants", st.grants)
	}
}
