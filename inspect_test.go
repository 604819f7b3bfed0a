package dlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

func TestInspect(t *testing.T) {
	c := newClient(t, shared)
	other := newClient(t, shared)
	ctx := ctxT(t)
	info, err := c.Inspect(ctx, "inspect:free")
	if err != nil || info.Locked || len(info.Holders) != 0 || info.TTL != 0 {
		t.Fatalf("free lock: %+v, %v", info, err)
	}
	m := c.Mutex("inspect:m")
	mustLockTwice(t, m)
	w := other.Mutex("inspect:m")
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "waiter queued", func() bool {
		i, _ := c.Inspect(ctx, "inspect:m")
		return len(i.Waiters) == 1
	})
	info, err = c.Inspect(ctx, "inspect:m")
	if err != nil || !info.Locked || len(info.Holders) != 1 || info.Holders[0].Owner != m.Owner() || info.Holders[0].Count != 2 ||
		info.Token != m.Token() || info.TTL <= 0 || !strings.HasPrefix(info.Waiters[0].Owner, w.hd.Engine().Cfg.ClientID+":") || info.Mode != "" {
		t.Fatalf("held lock: %+v, %v (owner %s token %d)", info, err, m.Owner(), m.Token())
	}
	mustUnlock(t, m)
	mustUnlock(t, m)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	mustUnlock(t, w)

	rw := c.RWMutex("inspect:rw")
	if err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	info, err = c.Inspect(ctx, "inspect:rw")
	if err != nil || info.Mode != "read" || len(info.Holders) != 1 {
		t.Fatalf("read-locked: %+v, %v", info, err)
	}
	if err := rw.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}

	rdbFor(t, shared).Set(ctx, "inspect:string", "x", time.Minute)
	if _, err := c.Inspect(ctx, "inspect:string"); err == nil {
		t.Fatal("a string key inspected as a lock")
	}
	if _, err := c.Inspect(ctx, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty name: %v", err)
	}
}

// A hold the watchdog renews shows how long it has been held and how often
// it was renewed; a fixed lease and a hold not yet renewed show neither,
// and a released owner's record is not shown for the next holder.
func TestInspectShowsLongHolds(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	m := c.Mutex("inspect:long")
	mustLock(t, m)
	fixed := c.Mutex("inspect:fixed")
	if ok, err := fixed.TryLock(ctx, 0, 5*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	start := time.Now()
	var h Holder
	waitFor(t, "two renewals", func() bool {
		info, err := c.Inspect(ctx, "inspect:long")
		if err != nil || len(info.Holders) != 1 {
			t.Fatal(info, err)
		}
		h = info.Holders[0]
		return h.Renewals >= 2
	})
	if h.HeldFor < 150*time.Millisecond || h.HeldFor > time.Since(start)+time.Second {
		t.Fatalf("held for %v after two renewals (100ms apart), %v after the grant", h.HeldFor, time.Since(start))
	}
	if info, err := c.Inspect(ctx, "inspect:fixed"); err != nil || info.Holders[0].Renewals != 0 || info.Holders[0].HeldFor != 0 {
		t.Fatalf("a fixed lease shows a long hold: %+v, %v", info, err)
	}
	mustUnlock(t, m)
	next := c.Mutex("inspect:long")
	mustLock(t, next)
	if info, err := c.Inspect(ctx, "inspect:long"); err != nil || info.Holders[0].Renewals != 0 {
		t.Fatalf("the next holder shows the last one's record: %+v, %v", info, err)
	}
	mustUnlock(t, next)
	if err := fixed.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Inspect and Locks list a queue's first MaxWaitersListed waiters and count
// the rest: reading a whole queue, which anyone allowed to write there may
// make long, would cost Redis (and every Client on it) in proportion.
func TestInspectBoundsTheWaitersRead(t *testing.T) {
	c := newClient(t, shared)
	rdb := rdbFor(t, shared)
	ctx := ctxT(t)
	const name, extra = "inspect:long-queue", 50
	queue := keys.For(name).Queue
	for i := range MaxWaitersListed + extra {
		rdb.RPush(ctx, queue, keys.QueueEntry(uint64(i+1), 30000, "neighbour:"+strconv.Itoa(i)))
	}
	rdb.PExpire(ctx, queue, time.Minute)
	t.Cleanup(func() { rdb.Del(context.Background(), queue) })
	info, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiters) != MaxWaitersListed || info.MoreWaiters != extra {
		t.Fatalf("Inspect listed %d waiters and counted %d more, want %d and %d", len(info.Waiters), info.MoreWaiters, MaxWaitersListed, extra)
	}
	if info.Waiters[0].Owner != "neighbour:0" {
		t.Fatalf("first waiter listed: %q, want the queue's first", info.Waiters[0].Owner)
	}
}
