package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Waiters from separate Clients that arrive one after another are granted
// the lock in that order, with pub/sub and in spin mode.
func TestFairArrivalOrder(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"pubsub", nil}, {"spin", []Option{WithSpin(time.Millisecond, 8*time.Millisecond)}}} {
		t.Run(mode.name, func(t *testing.T) {
			r := testenvRedis(t)
			ctx := ctxT(t)
			rdb := rdbFor(t, r)
			holder := newClient(t, r, mode.opts...).FairMutex("fair:order")
			mustLock(t, &holder.Mutex)
			const n = 6
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			for i := range n {
				c := newClient(t, r, mode.opts...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := c.FairMutex("fair:order")
					if err := m.Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
					if err := m.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}()
				// Stagger: the next one arrives once this one is queued.
				waitFor(t, "waiter queued", func() bool {
					l, _ := rdb.LLen(ctx, holder.p.Keys().Queue).Result()
					return l == int64(i+1)
				})
			}
			mustUnlock(t, &holder.Mutex)
			wg.Wait()
			for i, got := range order {
				if got != i {
					t.Fatalf("grant order %v, want arrival order", order)
				}
			}
			if len(order) != n {
				t.Fatalf("%d grants, want %d", len(order), n)
			}
		})
	}
}

// A lock that becomes free by expiry while a waiter is queued goes to that
// waiter, not to a newcomer; a plain Mutex lets the newcomer in.
func TestFairNoBarging(t *testing.T) {
	for _, fair := range []bool{true, false} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			r := testenvRedis(t)
			ctx := ctxT(t)
			rdb := rdbFor(t, r)
			handle := func(c *Client) *Mutex {
				if fair {
					return &c.FairMutex("barge").Mutex
				}
				return c.Mutex("barge")
			}
			// A holder that will vanish without a release message: a crashed
			// process whose key expired.
			if err := rdb.HSet(ctx, "barge", "crashed:1", 1).Err(); err != nil {
				t.Fatal(err)
			}
			rdb.PExpire(ctx, "barge", time.Minute)
			wc := newClient(t, r, withRecheck(time.Minute)) // the queued waiter does not re-check on its own
			w := handle(wc)
			got := make(chan error, 1)
			go func() { got <- w.Lock(ctx) }()
			waitFor(t, "waiter queued", func() bool { l, _ := rdb.LLen(ctx, w.p.Keys().Queue).Result(); return l == 1 })
			rdb.Del(ctx, "barge") // its TTL ran out
			newcomer := handle(newClient(t, r))
			ok, err := newcomer.TryLock(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !fair {
				if !ok {
					t.Fatal("a plain Mutex refused a free lock")
				}
				mustUnlock(t, newcomer) // hands it to the waiter
				if err := <-got; err != nil {
					t.Fatal(err)
				}
				mustUnlock(t, w)
				return
			}
			if ok {
				t.Fatal("a newcomer barged past a queued waiter")
			}
			awaitNil(t, got, 2*time.Second, "the queued waiter was not handed the free lock")
			if w.Token() == 0 {
				t.Fatal("no token")
			}
			mustUnlock(t, w)
		})
	}
}

// A waiter whose ctx is cancelled leaves the queue at once, and the one
// behind it gets the lock on the next release.
func TestFairCancelledWaiterLeaves(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	h := newClient(t, r).FairMutex("fair:cancel")
	mustLock(t, &h.Mutex)
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- newClient(t, r).FairMutex("fair:cancel").Lock(cctx) }()
	waitFor(t, "first queued", func() bool { l, _ := rdb.LLen(ctx, h.p.Keys().Queue).Result(); return l == 1 })
	second := newClient(t, r).FairMutex("fair:cancel")
	got := make(chan error, 1)
	go func() { got <- second.Lock(ctx) }()
	waitFor(t, "second queued", func() bool { l, _ := rdb.LLen(ctx, h.p.Keys().Queue).Result(); return l == 2 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	// The cancelled waiter leaves in the background (its caller has gone);
	// the live waiter keeps the queue alive, so only leaving empties it.
	waitFor(t, "the cancelled waiter to leave the queue", func() bool { l, _ := rdb.LLen(ctx, h.p.Keys().Queue).Result(); return l == 1 })
	start := time.Now()
	mustUnlock(t, &h.Mutex)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the waiter behind a cancelled one waited %v", d)
	}
	mustUnlock(t, &second.Mutex)
}

// A queued entry of a process that no longer exists delays the next waiter
// by about the claim window plus one re-check, not by a lease.
func TestFairDeadEntrySkipped(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	const claim, recheck = 200 * time.Millisecond, 300 * time.Millisecond
	h := newClient(t, r, WithHandoffClaim(claim)).FairMutex("fair:dead")
	mustLock(t, &h.Mutex)
	if err := rdb.RPush(ctx, h.p.Keys().Queue, "7 30000 dead-client:1").Err(); err != nil {
		t.Fatal(err)
	}
	live := newClient(t, r, WithHandoffClaim(claim), withRecheck(recheck))
	w := live.FairMutex("fair:dead")
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "live waiter queued", func() bool { l, _ := rdb.LLen(ctx, h.p.Keys().Queue).Result(); return l == 2 })
	start := time.Now()
	mustUnlock(t, &h.Mutex) // hands the lock to the dead entry
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > claim+recheck+500*time.Millisecond {
		t.Fatalf("waited %v behind a dead entry, want about claim (%v) + re-check (%v)", d, claim, recheck)
	}
	mustUnlock(t, &w.Mutex)
}
