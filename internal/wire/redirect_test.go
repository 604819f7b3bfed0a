package wire

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A droppable call (a renewal) whose caller left while a Cluster sent it
// back (TRYAGAIN, mid-migration) did not run, as the redirect says: it is
// not sent again once the slot settles. Resending it then would run it
// after its caller stopped waiting for it (a renewal extending a hold whose
// holder was told it was lost).
func TestRedirectedDroppableNotResentAfterCallerLeft(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	rdb := cl.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := cl.Nodes()
	const k1, k2 = "{drop}:a", "{drop}:b"
	slot, err := testenv.KeySlot(ctx, nodes[0], k1)
	if err != nil {
		t.Fatal(err)
	}
	from := cl.SlotNode(slot)
	to := nodes[0]
	if to == from {
		to = nodes[1]
	}
	fromID, err := testenv.NodeID(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	toID, err := testenv.NodeID(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	// A migration under way: a script of two keys, neither there, is sent
	// from the source to the target (ASK) and back (TRYAGAIN) until the
	// slot is stable again.
	if _, err := to.Do(ctx, "cluster", "setslot", slot, "importing", fromID); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Do(ctx, "cluster", "setslot", slot, "migrating", toID); err != nil {
		t.Fatal(err)
	}
	stable := func() {
		for _, n := range []*testenv.Redis{to, from} {
			if _, err := n.Do(context.Background(), "cluster", "setslot", slot, "stable"); err != nil {
				t.Error(err)
			}
		}
	}
	defer stable()
	w := New(rdb, 10*time.Second, true)
	defer func() {
		w.Stop()
		select {
		case <-w.Drain():
		case <-ctx.Done():
			t.Error("calls still pending")
		}
	}()
	s := NewScript("redis.call('set', KEYS[1], 'ran') return 1")
	cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer ccancel()
	err = s.RunDroppable(cctx, w, []any{k1, k2}).Err()
	if err == nil || cctx.Err() == nil {
		t.Fatalf("RunDroppable mid-migration = %v, want the ctx's error", err)
	}
	// The slot settles after the send in flight when the caller left (and
	// go-redis's own redirects within it) is over, within the cleanup
	// timeout.
	time.Sleep(2 * time.Second)
	stable()
	time.Sleep(time.Second)
	if n, err := rdb.Exists(ctx, k1).Result(); err != nil || n != 0 {
		t.Fatalf("the droppable call ran after its caller left (exists %d, %v)", n, err)
	}
}
