package dlock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// With WithReplicaAck a grant succeeds once the replica has it, and fails
// (released, ErrNotReplicated) when the replica cannot acknowledge in time.
func TestReplicaAck(t *testing.T) {
	primary := testenvRedis(t)
	replica := testenv.StartReplica(t, primary)
	// Generous where the replica is up (a loaded CI box can be slow to
	// replicate), short where it is paused.
	c := newClient(t, primary, WithReplicaAck(1, 5*time.Second))
	short := newClient(t, primary, WithReplicaAck(1, 300*time.Millisecond))
	ctx := ctxT(t)

	m := c.Mutex("acked")
	mustLock(t, m)
	if v, err := replica.Do(ctx, "HGET", "acked", m.Owner()); err != nil || v != "1" {
		t.Fatalf("replica has the hold as %v, %v right after Lock returned", v, err)
	}
	mustUnlock(t, m)

	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer replica.Resume()
	n := short.Mutex("not-acked")
	ok, err := n.TryLock(ctx, time.Second, 0)
	if ok || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("TryLock with the replica paused = %v, %v; want ErrNotReplicated", ok, err)
	}
	if l, _ := n.IsLocked(ctx); l {
		t.Fatal("an unacknowledged grant was left held")
	}
	if n.Token() != 0 || short.e.Renewals() != 0 {
		t.Fatal("an unacknowledged grant left local state behind")
	}

	if _, err := New(rdbFor(t, primary), WithReplicaAck(0, time.Second)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("WithReplicaAck(0) = %v", err)
	}
}
