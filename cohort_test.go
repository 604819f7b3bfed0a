package dlock

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/wire"
)

// Goroutines of one Client pass a Mutex among themselves (lock cohorting):
// one holder at a time, every token above the one before, each pass one
// script call and no claim, and the holder's TTL is the new holder's own.
func TestCohortPassesAmongGoroutines(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	const workers, rounds = 6, 8
	// Warm-up: scripts loaded, the lock's channel subscribed.
	m := c.Mutex("cohort:hot")
	mustLock(t, m)
	mustUnlock(t, m)
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		in     atomic.Int32
		mu     sync.Mutex
		tokens []uint64
		wg     sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				m := c.Mutex("cohort:hot")
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if in.Add(1) != 1 {
					t.Error("two holders at once")
				}
				mu.Lock()
				tokens = append(tokens, m.Token())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				in.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("grant %d has token %d, not above %d", i, tokens[i], tokens[i-1])
		}
	}
	stats := dataCommands(t, r)
	passes := stats["lrem"] // pass.lua's one LREM of the waiter's entry
	if passes == 0 {
		t.Fatalf("no hold was passed among the goroutines: %v", stats)
	}
	// Every release that went through Redis instead is a hand-off
	// (release.lua's LPOP) or a release with nobody queued (its DEL without
	// an HSET): at most one in MaxPasses+1 while others wait.
	viaRedis := stats["lpop"]
	if limit := int64(workers*rounds)/(lease.MaxPasses+1) + int64(workers); viaRedis > limit {
		t.Fatalf("%d releases through Redis of %d grants (%d passed), want at most %d: %v", viaRedis, workers*rounds, passes, limit, stats)
	}
	t.Logf("%d grants, %d passed; commands %v", workers*rounds, passes, stats)
}

// Another process waiting for the lock is not starved by a Client whose
// goroutines pass it among themselves: once its entry is first in the
// queue, it gets the lock within MaxPasses grants of the other Client.
func TestCohortDoesNotStarveOtherProcesses(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	rdb := rdbFor(t, r)
	const name = "cohort:fair-share"
	var grantsA atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				m := a.Mutex(name)
				if err := m.Lock(ctx); err != nil {
					return
				}
				grantsA.Add(1)
				time.Sleep(2 * time.Millisecond)
				_ = m.Unlock(context.Background())
			}
		}()
	}
	defer wg.Wait()
	waitFor(t, "A's goroutines queued", func() bool { n, _ := rdb.LLen(ctx, keys.For(name).Queue).Result(); return n >= 2 })
	mb := b.Mutex(name)
	got := make(chan int64, 1)
	go func() {
		if err := mb.Lock(ctx); err != nil {
			t.Error(err)
			got <- -1
			return
		}
		got <- grantsA.Load()
	}()
	// B's entry is queued behind at most A's three waiters; from then on
	// each pass takes one of those out (they queue again behind B), and
	// after MaxPasses passes a release goes to the queue's head.
	waitFor(t, "B queued", func() bool {
		q, _ := rdb.LRange(ctx, keys.For(name).Queue, 0, -1).Result()
		for _, e := range q {
			if _, _, field, ok := keys.ParseQueueEntry(e); ok && strings.HasPrefix(field, b.ID()+":") {
				return true
			}
		}
		return false
	})
	from := grantsA.Load()
	select {
	case n := <-got:
		if n < 0 {
			return
		}
		if n-from > lease.MaxPasses+1 {
			t.Fatalf("B waited %d grants of A, want at most %d", n-from, lease.MaxPasses+1)
		}
		t.Logf("B granted after %d grants of A", n-from)
		cancel()
		_ = mb.Unlock(context.Background())
	case <-time.After(10 * time.Second):
		t.Fatal("B starved")
	}
}

// pass.lua makes a holder only of a waiter still queued, and only from a
// hold counted once; otherwise it changes nothing and the caller releases
// as usual. A waiter that gave up (leave.lua takes its entry out first) is
// never made a holder nobody knows of.
func TestCohortPassScript(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	src := wire.WithLib(kind.Source("lib.lua"), kind.Source("pass.lua"))
	ks := keys.For("cohort:script")
	t.Cleanup(func() { rdb.Del(ctx, ks.Lock, ks.Fence, ks.Queue) })
	entry := keys.MutexEntry(5, 30000, "c:2")
	setup := func(count int, queued bool) {
		t.Helper()
		rdb.Del(ctx, ks.Lock, ks.Fence, ks.Queue)
		rdb.HSet(ctx, ks.Lock, "c:1", count)
		rdb.PExpire(ctx, ks.Lock, 30*time.Second)
		rdb.Set(ctx, ks.Fence, 41, time.Hour)
		if queued {
			rdb.RPush(ctx, ks.Queue, keys.MutexEntry(9, 30000, "other:1"), entry)
			rdb.PExpire(ctx, ks.Queue, time.Minute)
		}
	}
	pass := func() int64 {
		t.Helper()
		n, err := rdb.Eval(ctx, src, []string{ks.Lock, ks.Fence, ks.Queue}, "c:1", 86400000, entry, "c:2", 20000).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	setup(1, true)
	if tok := pass(); tok != 42 {
		t.Fatalf("pass to a queued waiter answered %d, want token 42", tok)
	}
	if h := rdb.HGetAll(ctx, ks.Lock).Val(); len(h) != 1 || h["c:2"] != "1" {
		t.Fatalf("lock after the pass: %v", h)
	}
	if ttl := rdb.PTTL(ctx, ks.Lock).Val(); ttl <= 19*time.Second || ttl > 20*time.Second {
		t.Fatalf("the new holder's TTL is %v, want its own 20s", ttl)
	}
	if q := rdb.LRange(ctx, ks.Queue, 0, -1).Val(); len(q) != 1 {
		t.Fatalf("queue after the pass: %v (the waiter's entry must go, the other stay first)", q)
	}
	if tok := pass(); tok != 0 {
		t.Fatalf("a resent pass answered %d: the holder is no longer c:1", tok)
	}
	for _, c := range []struct {
		name   string
		count  int
		queued bool
	}{{"waiter left", 1, false}, {"hold counted twice", 2, true}} {
		setup(c.count, c.queued)
		if n := pass(); n != 0 {
			t.Fatalf("%s: pass answered %d, want 0", c.name, n)
		}
		if h := rdb.HGetAll(ctx, ks.Lock).Val(); len(h) != 1 || h["c:1"] == "" {
			t.Fatalf("%s: lock changed: %v", c.name, h)
		}
		if v := rdb.Get(ctx, ks.Fence).Val(); v != "41" {
			t.Fatalf("%s: fencing counter changed to %s", c.name, v)
		}
	}
}
