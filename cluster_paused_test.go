package dlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// One master of a Cluster stops answering (SIGSTOP) for longer than the
// watchdog's TTL (1.5 s against 900 ms; shorter than the cluster's node
// timeout, so that the other master stays up): the holds on it are lost,
// as they should be, but the hold on the other master must be renewed all
// along. Before, the
// renewer sent each slot's batch one after another, each waiting up to a
// period for the paused node, and the wire's batch workers, shared by
// every node, waited for the paused node's read timeout: the hold on the
// healthy master was declared lost (ErrUnconfirmed) too.
func TestRenewalOfAPausedNodeDelaysNoOtherNode(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	cc := cl.NewClient(t)
	c := newClientOn(t, cc, WithWatchdogTimeout(900*time.Millisecond))
	ctx := ctxT(t)
	paused := cl.Nodes()[0]

	// Eight names in eight slots of the node to pause, one on the other.
	var onPaused []string
	var healthy string
	seen := map[uint16]bool{}
	for i := 0; len(onPaused) < 8 || healthy == ""; i++ {
		name := fmt.Sprintf("paused-node-%d", i)
		s := keys.Slot(name)
		if cl.SlotNode(int(s)) == paused {
			if len(onPaused) < 8 && !seen[s] {
				seen[s] = true
				onPaused = append(onPaused, name)
			}
		} else if healthy == "" {
			healthy = name
		}
	}
	holds := map[string]context.Context{}
	for _, name := range append(onPaused, healthy) {
		hold, err := c.Mutex(name).LockContext(context.Background())
		if err != nil {
			t.Fatalf("lock %s: %v", name, err)
		}
		holds[name] = hold
	}
	defer func() {
		for name, hold := range holds {
			_ = c.Mutex(name).Unlock(hold)
		}
	}()

	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := paused.Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	defer resume()
	select {
	case <-holds[healthy].Done():
		t.Fatalf("the hold on the healthy master was lost while the other master was paused: %v", context.Cause(holds[healthy]))
	case <-time.After(1500 * time.Millisecond):
	}
	resume()
	// Redis is the truth: the healthy master still has the hold.
	n, err := cc.Exists(ctx, healthy).Result()
	if err != nil || n != 1 {
		t.Fatalf("healthy hold's key: exists %d, %v", n, err)
	}
	if err := holds[healthy].Err(); err != nil {
		t.Fatalf("healthy hold: %v (%v)", err, context.Cause(holds[healthy]))
	}
}

// While one master is paused, locks on the other master are still taken,
// waited for and handed off: a waiter there gets the lock its holder
// releases, and a new lock is granted, before the paused master answers
// again, though the holder's Client keeps renewing holds on the paused
// master meanwhile (a 900 ms watchdog, four slots). Before, those renewals
// held both of the Client's batch workers until go-redis's read timeout,
// and its Unlock on the healthy master waited behind them.
func TestPausedMasterHoldsBackNoWaiterElsewhere(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	cc := cl.NewClient(t)
	holder := newClientOn(t, cc, WithWatchdogTimeout(900*time.Millisecond))
	waiter := newClientOn(t, cl.NewClient(t))
	ctx := ctxT(t)
	paused := cl.Nodes()[0]
	var onPaused []string
	var healthy, fresh string
	seen := map[uint16]bool{}
	for i := 0; len(onPaused) < 4 || healthy == "" || fresh == ""; i++ {
		name := fmt.Sprintf("paused-wait-%d", i)
		s := keys.Slot(name)
		switch {
		case cl.SlotNode(int(s)) == paused:
			if len(onPaused) < 4 && !seen[s] {
				seen[s] = true
				onPaused = append(onPaused, name)
			}
		case healthy == "":
			healthy = name
		case fresh == "":
			fresh = name
		}
	}
	// Both Clients reach both masters once, as a running service has.
	for _, c := range []*Client{holder, waiter} {
		for _, name := range []string{onPaused[0], healthy} {
			if err := c.Mutex(name).Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.Mutex(name).Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range append(onPaused, healthy) {
		if err := holder.Mutex(name).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan error, 1)
	go func() {
		err := waiter.Mutex(healthy).Lock(ctx)
		if err == nil {
			err = waiter.Mutex(healthy).Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, "the waiter queued", func() bool { return cc.LLen(ctx, "dlock:queue:{"+healthy+"}").Val() == 1 })
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = paused.Resume() }()
	// Renewals to the paused master are on their way.
	time.Sleep(400 * time.Millisecond)
	// Well within the cluster's node timeout (2 s): the healthy master
	// stays up. Only a call that waits for the paused master runs past it.
	within, cancel := context.WithTimeout(ctx, 1100*time.Millisecond)
	defer cancel()
	if err := holder.Mutex(healthy).Unlock(within); err != nil {
		t.Fatalf("Unlock on the healthy master while the other was paused: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter on the healthy master: %v", err)
		}
	case <-within.Done():
		t.Fatal("the waiter on the healthy master was not handed the lock while the other master was paused")
	}
	if err := holder.Mutex(fresh).Lock(within); err != nil {
		t.Fatalf("a new lock on the healthy master, through the Client renewing on the paused one: %v", err)
	}
	if err := holder.Mutex(fresh).Unlock(within); err != nil {
		t.Fatal(err)
	}
	if err := paused.Resume(); err != nil {
		t.Fatal(err)
	}
	for _, name := range onPaused {
		_ = holder.Mutex(name).Unlock(ctx) // lost by now: their TTL passed
	}
}
