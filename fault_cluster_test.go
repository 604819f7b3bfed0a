package dlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// maxEventWait bounds TestFaultCluster's waits, all woken by events: a
// hold of at most 100 ms ahead, plus the fault's own stall, with room for a
// loaded box; far below the 5 s a waiter left to the periodic re-check
// would wait.
const maxEventWait = 2500 * time.Millisecond

// Redis Cluster: holds and waits on four names of one slot, contended by
// two Clients, while (1) the slot migrates to another master (clients meet
// ASK, TRYAGAIN, then MOVED; lock, queue, fencing and latch keys move
// together, TTLs intact) and then (2) that master fails over to its replica
// by a manual failover (no write lost). Redis keeps every lock throughout,
// so there must be no overlap and tokens must keep increasing; the rows
// report how many holders were told of a loss.
//
// Every waiter must be woken by an event (a hand-off, a release message, or
// the re-check its subscription's move triggers), never by the periodic
// re-check: the Clients re-check on their own only once a minute, and each
// lock call waits at most 5 s, so a waiter an event missed would end in a
// wait timeout. With two contenders per name and holds of at most 100 ms,
// no wait may come near that.
func TestFaultCluster(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	nodes := cl.Nodes()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := []string{"{mig}:0", "{mig}:1", "{mig}:2", "{mig}:3"}
	slot, err := testenv.KeySlot(ctx, nodes[0], names[0])
	if err != nil {
		t.Fatal(err)
	}
	from := cl.SlotNode(slot)
	to := nodes[0]
	if to == from {
		to = nodes[1]
	}
	replica := cl.AddReplica(t, to)
	servers := append(cl.Nodes(), replica)

	phase := func(scenarioName, faults string, inject func(s *scenario)) {
		s := newScenario(t, scenarioName, servers...)
		cs := []*dlock.Client{clusterFaultClient(s, cl), clusterFaultClient(s, cl)}
		var stops []func()
		for i, name := range names {
			stops = append(stops, s.contend(cs, 1, holdOpts{name: name}, uint64(100*i), 20*time.Millisecond, 100*time.Millisecond))
		}
		time.Sleep(time.Second)
		inject(s)
		after := time.Now()
		time.Sleep(1500 * time.Millisecond)
		for _, stop := range stops {
			stop()
		}
		leaks := s.shutdown()
		row, st := s.row(faults, leaks)
		longest := s.longestWait(time.Time{})
		row.Notes = fmt.Sprintf("%d grants after the change; %d lock calls failed; longest wait %v", s.grantsAfter(after), s.errCount("other"), longest.Round(time.Millisecond))
		record(t, row)
		s.assertExclusive(st)
		s.assertEventWakes(longest)
		if s.grantsAfter(after) == 0 {
			t.Errorf("%s: no grant after the change", scenarioName)
		}
	}

	phase("Cluster slot migration",
		fmt.Sprintf("slot %d (4 lock names) migrated to another master under load: 2 Clients × 4 names, holds 20–100 ms, watchdog 1 s", slot),
		func(s *scenario) {
			s.fault("migrate")
			if err := cl.MigrateSlot(ctx, slot, from, to); err != nil {
				t.Fatal(err)
			}
		})
	phase("Cluster master failover",
		"manual failover (CLUSTER FAILOVER) of that master to its replica under the same load",
		func(s *scenario) {
			s.fault("failover")
			if err := cl.Failover(ctx, replica); err != nil {
				t.Fatal(err)
			}
		})
}

// clusterFaultClient returns a Client over a ClusterClient of cl with short
// timeouts, a 1 s watchdog and a periodic re-check of a minute: its waiters
// are woken by events or not in time.
func clusterFaultClient(s *scenario, cl *testenv.Cluster) *dlock.Client {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    cl.Addrs(),
		DialTimeout:              time.Second,
		ReadTimeout:              time.Second,
		WriteTimeout:             time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	return s.clientOver(rdb, dlock.WithWatchdogTimeout(time.Second), dlock.WithCloseTimeout(time.Second),
		dlock.WithRecheckForTest(time.Minute))
}

// assertEventWakes fails if a waiter was not woken by an event: one left to
// the periodic re-check (a minute) waits out its 5 s and times out, and
// none may wait longer than maxEventWait.
func (s *scenario) assertEventWakes(longest time.Duration) {
	s.t.Helper()
	if n := s.errCount("wait timeout"); n > 0 {
		s.t.Errorf("%s: %d waiters timed out: not woken by an event", s.name, n)
	}
	if longest > maxEventWait {
		s.t.Errorf("%s: a waiter waited %v (more than %v): not woken by an event", s.name, longest, maxEventWait)
	}
}
