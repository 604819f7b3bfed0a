package dlock_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// A Sentinel failover measured over many grants in flight, without replica
// acknowledgement: grants made in the last moments before the promotion may
// not have reached the replica, and the promoted replica grants those locks
// again. Each such overlap must be caught by fencing and its stale holder
// told; the row reports the share of grants in flight that were lost and
// the share of those whose holder was told.
func TestFaultSentinelFailover(t *testing.T) {
	sentinelFailover(t, false)
}

// The same failover with WithReplicaAck(1, 500ms): a grant counts only once
// the replica has it, so the promotion loses none and there is no overlap.
func TestFaultSentinelFailoverReplicaAck(t *testing.T) {
	sentinelFailover(t, true)
}

func sentinelFailover(t *testing.T, ack bool) {
	name := "Sentinel failover"
	if ack {
		name = "Sentinel failover, WithReplicaAck"
	}
	const lag = 20 * time.Millisecond
	primary := testenv.StartRedis(t)
	// The replica replicates through a proxy that delays each direction,
	// as a replica on another machine would lag.
	link := testenv.NewFaultProxy(t, primary.Addr())
	link.SetLatency(lag, lag)
	host, port, _ := net.SplitHostPort(link.Addr())
	replica := testenv.StartRedis(t, testenv.WithArgs("--replicaof", host, port))
	waitUntil(t, "replication link up", func() bool {
		info, err := replica.Info(context.Background(), "replication")
		return err == nil && info["master_link_status"] == "up"
	})
	sentinel := testenv.StartSentinel(t, primary)
	s := newScenario(t, name, primary, replica)

	opts := []dlock.Option{dlock.WithWatchdogTimeout(time.Second), dlock.WithCloseTimeout(time.Second)}
	if ack {
		opts = append(opts, dlock.WithReplicaAck(1, 500*time.Millisecond))
	}
	var cs []*dlock.Client
	for range 2 {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:    testenv.MasterName,
			SentinelAddrs: []string{sentinel.Addr()},
			DialTimeout:   time.Second,
			ReadTimeout:   time.Second,
			WriteTimeout:  time.Second,
		})
		cs = append(cs, s.clientOver(rdb, opts...))
	}
	// Eight names, each contended by one goroutine per Client, holds of
	// 50–250 ms: about eight grants in flight at any moment.
	const names = 8
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cs {
		for n := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.withLockLoop(c, fmt.Sprintf("c%d/n%d", i, n), holdOpts{
					name: fmt.Sprintf("sf:%d", n),
					work: randWork(uint64(i*100+n), 50*time.Millisecond, 250*time.Millisecond),
				}, stop)
			}()
		}
	}
	time.Sleep(time.Second)
	s.fault("failover")
	faultAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	newPrimary, err := sentinel.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	// Sentinel turns the old primary into a replica of the new one only
	// at its next look at it (up to 10 s); do it now, as it will.
	nh, np, _ := net.SplitHostPort(newPrimary)
	if _, err := primary.Do(ctx, "REPLICAOF", nh, np); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	close(stop)
	wg.Wait()
	leaks := s.shutdown()
	row, st := s.row("", leaks)
	// In flight: held when the failover began, or granted before the
	// Clients learned of the new primary (on the old one).
	inFlight := s.res.between(faultAt, switched)
	lost, told := 0, 0
	for _, v := range inFlight {
		if s.res.lostByOverlap(v) || s.res.wasTold(v) {
			lost++
		}
		if s.res.wasTold(v) {
			told++
		}
	}
	row.Faults = fmt.Sprintf("SENTINEL FAILOVER with %d grants in flight (held at the failover or granted before the switch; %d names × 2 Clients contending, holds 50–250 ms); replica lagging %v each way; watchdog 1 s", len(inFlight), names, lag)
	if ack {
		row.Faults += "; WithReplicaAck(1, 500ms)"
	}
	row.Notes = fmt.Sprintf("%d of %d grants in flight lost (%s), %d of those holders told; %d grants after the switch; %d not replicated in time",
		lost, len(inFlight), pct(lost, len(inFlight)), told, s.grantsAfter(switched), s.errCount("not replicated"))
	record(t, row)
	if len(inFlight) == 0 {
		t.Error("no grant in flight at the failover")
	}
	if s.grantsAfter(switched) == 0 {
		t.Error("no grant after the failover")
	}
	if ack {
		s.assertExclusive(st)
		if lost > 0 {
			t.Errorf("%d grants acknowledged by the replica were lost in the failover", lost)
		}
	} else {
		s.assertFenced(st)
	}
	if told < lost {
		t.Errorf("%d grants lost in the failover, only %d holders told", lost, told)
	}
}

func pct(a, b int) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(b))
}

// between returns the visits inside at from or entered between from and
// to.
func (r *fencedResource) between(from, to time.Time) []*visit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*visit
	for _, v := range r.visits {
		if v.start.Before(to) && (v.end.IsZero() || v.end.After(from)) {
			out = append(out, v)
		}
	}
	return out
}

// lostByOverlap reports whether another holder entered while v was inside.
func (r *fencedResource) lostByOverlap(v *visit) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.overlaps {
		if o.a == v {
			return true
		}
	}
	return false
}

// wasTold reports whether v's holder was told of a loss.
func (r *fencedResource) wasTold(v *visit) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !v.told.IsZero()
}
