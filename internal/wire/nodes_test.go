package wire

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// A master that does not answer holds back only the calls for its slots:
// with every batch worker's pipeline waiting for it (go-redis's read
// timeout is a minute here), a call for the other master is still answered
// while it is paused. Before, one batcher served every node, and the call
// waited behind the paused master's pipelines until its ctx ended.
func TestPausedMasterHoldsBackNoOtherMaster(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(),
		ReadTimeout: time.Minute, WriteTimeout: time.Minute,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer cc.Close()
	w := New(cc, time.Second, true)
	defer w.Stop()
	paused := cl.Nodes()[0]
	var slow, fast string
	for i := 0; slow == "" || fast == ""; i++ {
		k := fmt.Sprintf("paused-master-%d", i)
		if cl.SlotNode(int(keys.Slot(k))) == paused {
			slow = k
		} else {
			fast = k
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The Wire learns the slot map from its first answer.
	for _, k := range []string{slow, fast} {
		call := NewCall(redis.NewIntCmd(ctx, "exists", k), nil)
		if left, err := w.Do(ctx, call); left || call.Cmd.Err() != nil {
			t.Fatalf("exists %s: %v %v", k, err, call.Cmd.Err())
		}
		call.Free()
	}
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = paused.Resume() }()
	// More calls for the paused master than there are workers, each left
	// by its caller at once.
	for range Workers + 1 {
		call := NewCall(redis.NewIntCmd(ctx, "exists", slow), nil)
		short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		if left, _ := w.Do(short, call); !left {
			t.Fatal("a call to the paused master was answered")
		}
		stop()
	}
	call := NewCall(redis.NewIntCmd(ctx, "exists", fast), nil)
	left, err := w.Do(ctx, call)
	if left {
		t.Fatalf("a call to the healthy master waited for the paused one: %v", err)
	}
	if call.Cmd.Err() != nil {
		t.Fatal(call.Cmd.Err())
	}
	call.Free()
	if err := paused.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Drain():
	case <-ctx.Done():
		t.Fatal("calls to the resumed master never finished")
	}
}

// A master's batcher idle when another master's is made (a new address: a
// failover, a replaced node) is retired: its workers end, so a Client over
// a Cluster whose nodes come and go keeps no goroutines for addresses it
// no longer uses. A call routed to it starts it again, and is answered.
func TestIdleMasterBatcherRetires(t *testing.T) {
	defer func(d time.Duration) { retireAfter = d }(retireAfter)
	retireAfter = 0 // any batcher idle at the moment is retired
	cl := testenv.StartCluster(t, 2)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer cc.Close()
	w := New(cc, time.Second, true)
	defer w.Stop()
	ks := map[*testenv.Redis]string{}
	for i := 0; len(ks) < 2; i++ {
		k := fmt.Sprintf("retire-%d", i)
		if n := cl.SlotNode(int(keys.Slot(k))); ks[n] == "" {
			ks[n] = k
		}
	}
	first, second := ks[cl.Nodes()[0]], ks[cl.Nodes()[1]]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	exists := func(k string) {
		t.Helper()
		call := NewCall(redis.NewIntCmd(ctx, "exists", k), nil)
		if left, err := w.Do(ctx, call); left || call.Cmd.Err() != nil {
			t.Fatalf("exists %s: %v %v", k, err, call.Cmd.Err())
		}
		call.Free()
	}
	exists(first) // the slot map, through the Wire's own batcher
	exists(first) // the first master's batcher
	probe := NewCall(redis.NewIntCmd(ctx, "exists", first), nil)
	b := w.nodes.batcherFor(w, probe)
	probe.Free()
	if workers(b) != Workers {
		t.Fatalf("the first master's batcher has %d workers, want %d", workers(b), Workers)
	}
	time.Sleep(time.Millisecond)
	exists(second) // the second master's batcher is made: the first, idle, retires
	waitUntil(t, "the idle batcher's workers to end", func() bool { return workers(b) == 0 })
	if !b.retired.Load() {
		t.Fatal("workers ended, batcher not marked retired")
	}
	exists(first)
	if b.retired.Load() || workers(b) != Workers {
		t.Fatalf("after a call to it: retired %v, %d workers; want started again with %d", b.retired.Load(), workers(b), Workers)
	}

	// A call routed to the batcher just before it is retired (Do routes,
	// then submits, without a lock between): it is still sent, answered
	// and counted until then.
	late := NewCall(redis.NewIntCmd(ctx, "exists", first), nil)
	if got := w.nodes.batcherFor(w, late); got != b {
		t.Fatal("the call is routed to another batcher")
	}
	// The call just answered may still count as pending for a moment.
	waitUntil(t, "the idle batcher retired", func() bool {
		b.retire(time.Now().Add(time.Hour))
		return b.retired.Load()
	})
	b.submit(late)
	if left, err := w.wait(ctx, late); left || late.Cmd.Err() != nil {
		t.Fatalf("a call that reached a retired batcher: left %v, %v, %v; want it answered", left, err, late.Cmd.Err())
	}
	late.Free()
	select {
	case <-w.Drain():
	case <-ctx.Done():
		t.Fatal("calls never drained")
	}
}

func workers(b *batcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.workers
}
