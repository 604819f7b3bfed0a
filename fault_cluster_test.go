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

// Redis Cluster: holds and waits on four names of one slot, contended by
// two Clients, while (1) the slot migrates to another master (clients meet
// ASK, TRYAGAIN, then MOVED; lock, queue, fencing and latch keys move
// together, TTLs intact) and then (2) that master fails over to its replica
// by a manual failover (no write lost). Redis keeps every lock throughout,
// so there must be no overlap and tokens must keep increasing; the rows
// report how many holders were told of a loss.
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
		var cs []*dlock.Client
		for range 2 {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{
				Addrs:                    cl.Addrs(),
				DialTimeout:              time.Second,
				ReadTimeout:              time.Second,
				WriteTimeout:             time.Second,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			})
			cs = append(cs, s.clientOver(rdb, dlock.WithWatchdogTimeout(time.Second), dlock.WithCloseTimeout(time.Second)))
		}
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
		row.Notes = fmt.Sprintf("%d grants after the change; %d lock calls failed", s.grantsAfter(after), s.errCount("other"))
		record(t, row)
		s.assertExclusive(st)
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
