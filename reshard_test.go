package dlock

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// TestFaultReshardUnderWaiters: a slot whose locks are held and waited for moves
// between masters again and again, its last step (SETSLOT NODE) sent in
// the cluster's node order, so that for a moment the source sends clients
// to the target and the target, still importing, sends them back: go-redis
// gives up after its redirects with a MOVED error. dlock must keep going
// within the caller's wait: every WithLock succeeds, no holder is told of
// a loss, no two holders overlap, tokens only grow, and no hold outlives
// its caller (the lock is free at the end).
//
// DLOCK_RESHARD_MIGRATIONS sets the number of migrations (default 6; the
// note of issue 27 reports 20).
func TestFaultReshardUnderWaiters(t *testing.T) {
	migrations := 6
	if v, err := strconv.Atoi(os.Getenv("DLOCK_RESHARD_MIGRATIONS")); err == nil && v > 0 {
		migrations = v
	}
	cl := testenv.StartCluster(t, 3)
	masters := cl.Nodes()
	for _, m := range masters {
		cl.AddReplica(t, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "{reshard}:coupon"
	slot, err := testenv.KeySlot(ctx, masters[0], name)
	if err != nil {
		t.Fatal(err)
	}
	var clients []*Client
	for range 3 {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                    cl.Addrs(),
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		t.Cleanup(func() { _ = rdb.Close() })
		clients = append(clients, newClientOn(t, rdb, WithWatchdogTimeout(time.Second)))
	}

	var inside, overlaps, lost, calls atomic.Int64
	var lastToken atomic.Uint64
	var mu sync.Mutex
	var errs []error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					err := c.WithLock(ctx, name, func(hctx context.Context) error {
						if inside.Add(1) > 1 {
							overlaps.Add(1)
						}
						defer inside.Add(-1)
						tok := TokenFrom(hctx)
						if prev := lastToken.Swap(tok); tok <= prev {
							overlaps.Add(1) // an older token after a newer one
						}
						select {
						case <-hctx.Done():
							lost.Add(1)
						case <-time.After(20 * time.Millisecond):
						}
						return nil
					}, WaitTime(15*time.Second))
					calls.Add(1)
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			}()
		}
	}
	from := cl.SlotNode(slot)
	for i := range migrations {
		time.Sleep(150 * time.Millisecond)
		to := masters[(indexOf(masters, from)+1)%len(masters)]
		if err := cl.MigrateSlotNodeOrder(ctx, slot, from, to, 100*time.Millisecond); err != nil {
			t.Fatalf("migration %d: %v", i, err)
		}
		from = to
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	recordReliability(t, reliabilityRow{
		Scenario: "Cluster reshard, SETSLOT NODE in node order",
		Faults: fmt.Sprintf("one slot migrated %d times between 3 masters (each with a replica), SETSLOT NODE sent to every master in node order 100 ms apart (MOVED both ways meanwhile); 3 Clients × 3 goroutines of WithLock, holds 20 ms, WaitTime 15 s, watchdog 1 s",
			migrations),
		Grants:   int(calls.Load()) - len(errs),
		Accepted: int(overlaps.Load()),
		Told:     int(lost.Load()),
		Signal:   -1,
		Notes:    fmt.Sprintf("%d of %d WithLock calls failed (cf1ff77: 9 of 45 with raw MOVED errors or a release refused with MOVED); the lock free once every caller returned", len(errs), calls.Load()),
	})
	for i, err := range errs {
		if i == 5 {
			t.Errorf("... and %d more", len(errs)-5)
			break
		}
		t.Errorf("WithLock: %v", err)
	}
	if n := lost.Load(); n > 0 {
		t.Errorf("%d holders were told of a loss", n)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d overlapping or out-of-order grants", n)
	}
	// Every caller has returned: no hold may be left behind.
	rdb := cl.NewClient(t)
	if n, err := rdb.Exists(ctx, name).Result(); err != nil || n != 0 {
		t.Errorf("the lock is still held after every caller returned (exists %d, %v)", n, err)
	}
	if ok, err := clients[0].Mutex(name).TryLock(ctx, 0, time.Second); !ok || err != nil {
		t.Errorf("TryLock after every caller returned: %v, %v", ok, err)
	}
}

func indexOf(rs []*testenv.Redis, r *testenv.Redis) int {
	for i, x := range rs {
		if x == r {
			return i
		}
	}
	return 0
}
