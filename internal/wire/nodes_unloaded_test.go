package wire

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A Cluster client whose slot map never loaded (here its user may not run
// CLUSTER SLOTS; a node still LOADING its data answers the same way) gets
// a Redis error as its first answer. That answer does not mean the map is
// loaded: a caller must not then look its master up with a round trip of
// its own, which go-redis bounds by its read timeout, not by the caller's
// ctx. Before, the Wire took any Redis error for a loaded map, and the next
// caller's MasterForKey reloaded the map on the caller's goroutine: with a
// node paused, a call under a 200ms ctx returned after the 3s read timeout.
func TestUnloadedSlotMapKeepsToCtx(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range cl.Nodes() {
		if _, err := n.Do(ctx, "ACL", "SETUSER", "noslots", "on", ">pw", "~*", "&*", "+@all", "-cluster|slots"); err != nil {
			t.Fatal(err)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(),
		Username: "noslots", Password: "pw",
		ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, MaxRedirects: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer cc.Close()
	w := New(cc, time.Second, true)
	defer func() {
		w.Stop()
		select {
		case <-w.Drain():
		case <-ctx.Done():
			t.Error("the wire did not drain")
		}
	}()
	call := NewCall(redis.NewIntCmd(ctx, "exists", "unloaded"), nil)
	if left, err := w.Do(ctx, call); left {
		t.Fatal(err)
	}
	if _, reply := call.Cmd.Err().(redis.Error); !reply {
		t.Fatalf("first answer %v, want the server's refusal of CLUSTER SLOTS", call.Cmd.Err())
	}
	call.Free()

	paused := cl.Nodes()[0]
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = paused.Resume() }()
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	start := time.Now()
	call = NewCall(redis.NewIntCmd(ctx, "exists", "unloaded"), nil)
	left, _ := w.Do(short, call)
	if took := time.Since(start); took > time.Second {
		t.Errorf("a call under a 200ms ctx returned after %v", took)
	}
	if !left {
		call.Free()
	}
	if err := paused.Resume(); err != nil {
		t.Fatal(err)
	}
}
