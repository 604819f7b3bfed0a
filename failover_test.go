package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// Through Sentinel: a grant that reached the replica survives a failover, the
// holder keeps renewing on the new primary, waiters reconnect their pub/sub
// and get the lock when it is released there.
func TestSentinelFailoverKeepsReplicatedHold(t *testing.T) {
	primary := testenvRedis(t)
	replica := testenv.StartReplica(t, primary)
	sentinel := testenv.StartSentinel(t, primary)
	ctx := ctxT(t)

	holderC, err := New(sentinel.NewFailoverClient(t), WithWatchdogTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holderC.Close()
	waiterC, err := New(sentinel.NewFailoverClient(t))
	if err != nil {
		t.Fatal(err)
	}
	defer waiterC.Close()

	h := holderC.Mutex("failover")
	mustLock(t, h)
	token := h.Token()
	if _, err := primary.Do(ctx, "WAIT", 1, 2000); err != nil {
		t.Fatal(err)
	}
	w := waiterC.Mutex("failover")
	got := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { got <- w.Lock(wctx) }()
	waitFor(t, "waiter queued", func() bool {
		n, _ := replica.Do(ctx, "LLEN", w.p.Keys().Queue)
		return n == int64(1)
	})

	newPrimary, err := sentinel.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if newPrimary != replica.Addr() {
		t.Fatalf("sentinel promoted %s, want the replica %s", newPrimary, replica.Addr())
	}
	// Two watchdog timeouts on the new primary: the hold must still be there.
	time.Sleep(6 * time.Second)
	if err := h.Err(); err != nil {
		t.Fatalf("replicated hold lost across the failover: %v", err)
	}
	if v, err := replica.Do(ctx, "HGET", "failover", h.Owner()); err != nil || v != "1" {
		t.Fatalf("new primary has the hold as %v, %v", v, err)
	}
	select {
	case err := <-got:
		t.Fatalf("waiter returned while the lock was held: %v", err)
	default:
	}
	mustUnlock(t, h)
	awaitNil(t, got, 10*time.Second, "waiter did not get the lock on the new primary")
	if w.Token() <= token {
		t.Fatalf("token after failover %d not above %d", w.Token(), token)
	}
	mustUnlock(t, w)
}

// Redis restarting without persistence forgets every lock: the holder is
// told at its next renewal, and a waiter whose queue vanished with the data
// still gets the lock once its connection is back.
func TestRedisRestartLosesHoldsAndWaitersRecover(t *testing.T) {
	r := testenvRedis(t)
	a := newClient(t, r, WithWatchdogTimeout(600*time.Millisecond))
	b := newClient(t, r, withRecheck(500*time.Millisecond))
	ctx := ctxT(t)
	h := a.Mutex("restart")
	mustLock(t, h)
	w := b.Mutex("restart")
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "waiter queued", func() bool { n, _ := rdbFor(t, r).LLen(ctx, w.p.Keys().Queue).Result(); return n == 1 })
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
		if !errors.Is(h.Err(), ErrLockLost) {
			t.Fatalf("holder's Err = %v", h.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("holder not told that the restart lost its lock")
	}
	awaitNil(t, got, 10*time.Second, "waiter never got the lock after the restart")
	if err := h.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock of the lost hold = %v", err)
	}
	mustUnlock(t, w)
}
