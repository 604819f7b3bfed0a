package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Locks finds every lock, election, semaphore and latch by SCAN (never
// KEYS), with holders, TTLs and waiters, and filters by a glob. A latch is
// found by its marker: one Redisson armed (no marker), and a marker whose
// count is gone, are not listed; a lock released earlier is listed only by
// LocksWithHistory.
func TestLocksListsEverything(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	a, b := newClient(t, r), newClient(t, r)
	rdb := rdbFor(t, r)
	rdb.HSet(ctx, "user:1", "name", "x") // a hash that is no lock
	rdb.Expire(ctx, "user:1", time.Minute)
	rdb.Set(ctx, "job:string", "x", time.Minute)

	m := a.Mutex("job:mutex")
	mustLock(t, m)
	defer mustUnlock(t, m)
	bg, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _, _ = b.Mutex("job:mutex").TryLock(bg, 20*time.Second, 0) }()
	waitQueued(t, a, "job:mutex", 1)

	free := a.Mutex("job:was-held") // only its fencing counter is left
	mustLock(t, free)
	mustUnlock(t, free)

	e := a.Election("job:leader")
	if _, err := e.Campaign(ctx, "host-a"); err != nil {
		t.Fatal(err)
	}
	defer e.Resign(ctx)
	go func() { _, _ = b.Election("job:leader").Campaign(bg, "host-b") }()
	waitQueued(t, a, "dlock:election:{job:leader}", 1)

	s := a.Semaphore("job:sem", 2)
	for range 2 {
		p, err := s.Acquire(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(ctx)
	}
	go func() {
		if p, err := b.Semaphore("job:sem", 2).Acquire(bg, 20*time.Second, 0); err == nil {
			_ = p.Release(context.Background())
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); rdb.LLen(ctx, "dlock:semaphore-queue:{job:sem}").Val() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("semaphore waiter not queued")
		}
		time.Sleep(2 * time.Millisecond)
	}

	l := a.CountDownLatch("job:latch")
	if ok, err := l.TrySetCount(ctx, 3, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "job:redisson-latch", 2, time.Minute) // Redisson's trySetCount: no marker
	rdb.Set(ctx, "dlock:latch:{job:gone}", 1, time.Minute)

	resetCounts(t, ctx, r)
	all, err := a.Locks(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	stats := dataCommands(t, r)
	if stats["keys"] != 0 || stats["scan"] == 0 {
		t.Fatalf("commands %v: want SCAN, never KEYS", stats)
	}
	got := map[string]LockInfo{}
	for _, info := range all {
		got[info.Type+" "+info.Name] = info
	}
	if len(got) != 4 || got["lock job:was-held"].Name != "" {
		t.Fatalf("found %v", all)
	}
	if l := got["lock job:mutex"]; !l.Locked || len(l.Holders) != 1 || l.Holders[0].Owner != m.Owner() || l.TTL <= 0 || len(l.Waiters) != 1 {
		t.Errorf("mutex %+v", l)
	}
	if l := got["election job:leader"]; !l.Locked || l.Leader != "host-a" || len(l.Holders) != 1 || l.TTL <= 0 || len(l.Waiters) != 1 {
		t.Errorf("election %+v", l)
	}
	if l := got["semaphore job:sem"]; !l.Locked || l.Permits != 2 || len(l.Holders) != 2 || l.Holders[0].TTL <= 0 || len(l.Waiters) != 1 {
		t.Errorf("semaphore %+v", l)
	}
	if l := got["latch job:latch"]; !l.Locked || l.Count != 2 || l.TTL <= 0 || l.TTL > time.Minute || len(l.Holders) != 0 {
		t.Errorf("latch %+v", l)
	}
	some, err := a.Locks(ctx, "job:[ls]*")
	if err != nil {
		t.Fatal(err)
	}
	if len(some) != 3 || some[0].Name != "job:leader" || some[1].Name != "job:latch" || some[2].Name != "job:sem" {
		t.Fatalf("Locks(job:[ls]*) = %+v", some)
	}
	history, err := a.LocksWithHistory(ctx, "job:was-*")
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != 1 || history[0].Name != "job:was-held" || history[0].Locked || history[0].Token == 0 {
		t.Fatalf("released lock %+v", history)
	}
	//lint:ignore SA1012 nil context on purpose
	if _, err := a.Locks(nil, ""); !errors.Is(err, ErrInvalidArgument) { //nolint:staticcheck
		t.Fatalf("nil ctx: %v", err)
	}
	stop()
}

// Locks lists what is locked now, and never dlock's own keys: the record
// of long holds that renewals write beside a lock (dlock:held:{name}, a
// hash whose fields look like a lock's owners) was listed as a second,
// locked lock, and every name used in the last 24 h as "not locked" (its
// fencing counter). LocksWithHistory adds those names on request. With and
// without a namespace.
func TestLocksListsNoCompanionKeys(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	for _, ns := range []string{"", "own"} {
		opts := []Option{WithWatchdogTimeout(1500 * time.Millisecond)} // the first renewal, at 500 ms, writes the record
		prefix := ""
		if ns != "" {
			opts, prefix = append(opts, WithNamespace(ns)), ns+":"
		}
		c := newClient(t, r, opts...)
		m := c.Mutex("own:held")
		mustLock(t, m)
		held := prefix + "dlock:held:{" + prefix + "own:held}"
		waitFor(t, "the record of long holds", func() bool { return rdb.Exists(ctx, held).Val() == 1 })
		was := c.Mutex("own:was-held") // only its fencing counter is left
		mustLock(t, was)
		mustUnlock(t, was)

		names := func(infos []LockInfo, err error) string {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, info := range infos {
				out = append(out, fmt.Sprintf("%s %s locked=%v", info.Type, info.Name, info.Locked))
			}
			return strings.Join(out, ", ")
		}
		if got, want := names(c.Locks(ctx, "")), "lock own:held locked=true"; got != want {
			t.Errorf("namespace %q: Locks = %s; want %s", ns, got, want)
		}
		if got, want := names(c.LocksWithHistory(ctx, "")), "lock own:held locked=true, lock own:was-held locked=false"; got != want {
			t.Errorf("namespace %q: LocksWithHistory = %s; want %s", ns, got, want)
		}
		mustUnlock(t, m)
	}
}
