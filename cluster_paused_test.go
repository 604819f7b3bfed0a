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
