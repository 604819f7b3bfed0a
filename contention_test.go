package dlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/lockcheck"
)

// Several Clients, each with its own connection pool, and several goroutines
// per Client take one lock over and over. Inside the critical section a
// counter must never see two holders; the recorded history must show no
// overlap and tokens increasing in grant order.
func TestContentionManyClients(t *testing.T) {
	r := testenvRedis(t)
	const clients, perClient, rounds = 4, 6, 10
	ctx := ctxT(t)
	var inside atomic.Int32
	var hist lockcheck.History
	var wg sync.WaitGroup
	for ci := range clients {
		c := newClient(t, r)
		for g := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("c%d/g%d", ci, g)
				for i := range rounds {
					m := c.Mutex("hot")
					var err error
					if i%3 == 2 {
						var ok bool
						ok, err = m.TryLock(ctx, 20*time.Second, 10*time.Second)
						if err == nil && !ok {
							err = fmt.Errorf("wait ran out")
						}
					} else {
						err = m.Lock(ctx)
					}
					if err != nil {
						t.Errorf("%s: %v", owner, err)
						return
					}
					start := time.Now()
					if n := inside.Add(1); n != 1 {
						t.Errorf("%s: %d holders at once", owner, n)
					}
					time.Sleep(time.Duration(i%3) * time.Millisecond)
					inside.Add(-1)
					hist.Add(lockcheck.Hold{Owner: owner, Token: m.Token(), Start: start, End: time.Now()})
					if err := m.Unlock(ctx); err != nil {
						t.Errorf("%s: Unlock: %v", owner, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if got, want := hist.Len(), clients*perClient*rounds; got != want {
		t.Fatalf("%d holds recorded, want %d", got, want)
	}
	if err := hist.Check(); err != nil {
		t.Fatal(err)
	}
}

// A waiter whose process dies while queued delays the lock by at most the
// claim window plus one re-check, not by a whole lease.
func TestCrashedWaiterDoesNotStall(t *testing.T) {
	r := testenvRedis(t)
	holderC := newClient(t, r)
	ctx := ctxT(t)
	h := holderC.Mutex("crash")
	mustLock(t, h)
	rdb := rdbFor(t, r)
	// A queued waiter of a client that no longer exists.
	if err := rdb.RPush(ctx, h.ks.Queue, "7 30000 dead-client:1").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, h.ks.Queue, time.Minute)
	live := newClient(t, r, WithHandoffClaim(200*time.Millisecond))
	live.cfg.recheck = 300 * time.Millisecond
	w := live.Mutex("crash")
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "live waiter queued", func() bool { n, _ := rdb.LLen(ctx, h.ks.Queue).Result(); return n == 2 })
	start := time.Now()
	// The holder's claim window is the holder client's (2s): the dead waiter
	// holds the lock that long at most.
	mustUnlock(t, h)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a crashed waiter stalled the lock")
	}
	if waited := time.Since(start); waited > 2*time.Second+300*time.Millisecond+2*time.Second {
		t.Errorf("waited %v behind a dead waiter, want about claim (2s) + re-check (300ms)", waited)
	}
	mustUnlock(t, w)
}

// WithLock returns fn's error untouched and always releases, even when the
// caller's context is already cancelled at that point.
func TestWithLock(t *testing.T) {
	c := newClient(t, shared)
	other := newClient(t, shared)
	ctx := ctxT(t)
	sentinel := fmt.Errorf("business error")
	err := c.WithLock(ctx, "with", func(ctx context.Context) error {
		if ok, _ := other.Mutex("with").TryLock(ctx, 0, 0); ok {
			t.Error("lock not held inside WithLock")
		}
		return sentinel
	})
	if err != sentinel {
		t.Fatalf("WithLock = %v, want fn's error itself", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	err = c.WithLock(cctx, "with", func(context.Context) error { cancel(); return nil })
	if err != nil {
		t.Fatalf("WithLock with ctx cancelled inside fn = %v", err)
	}
	if l, _ := other.Mutex("with").IsLocked(ctx); l {
		t.Fatal("not released after a cancelled ctx")
	}
	blocker := other.Mutex("with")
	mustLock(t, blocker)
	err = c.WithLock(ctx, "with", func(context.Context) error { return nil }, WaitTime(50*time.Millisecond))
	if !errorsIs(err, ErrWaitTimeout) {
		t.Fatalf("WithLock on a held lock = %v, want ErrWaitTimeout", err)
	}
	mustUnlock(t, blocker)
}
