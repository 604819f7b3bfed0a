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
