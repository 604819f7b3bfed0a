package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// inspect --all lists the locks, elections, semaphores and latches of a
// Redis (by SCAN, never KEYS), with holders, TTLs and waiters, a
// semaphore's permits held by weight and free, a latch's count, as text and
// JSON, and --match filters by name.
func TestInspectAll(t *testing.T) {
	r := testenv.StartRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	m := c.Mutex("all:mutex")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(ctx)
	e := c.Election("all:leader")
	if _, err := e.Campaign(ctx, "host-a"); err != nil {
		t.Fatal(err)
	}
	defer e.Resign(ctx)
	p, err := c.Semaphore("all:sem", 3).Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	p3, err := c.Semaphore("all:sem", 3).AcquireN(ctx, 2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Release(ctx)
	big := c.Semaphore("all:big", 10)
	p4, err := big.AcquireN(ctx, 4, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p4.Release(ctx)
	l := c.CountDownLatch("all:latch")
	if ok, err := l.TrySetCount(ctx, 3, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}

	res := dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all")
	wantCode(t, res, 0)
	for _, want := range []string{
		`election all:leader: leader "host-a", expires in`,
		"lock all:mutex: locked, expires in",
		"semaphore all:sem: 3 of 3 permits taken, 0 free",
		"semaphore all:big: 4 of 10 permits taken, 6 free",
		"  x4  expires in", "(id " + p4.ID() + ")",
		"latch all:latch: count 2, expires in",
		"  x1  expires in", "(id " + p.ID() + ")",
		"  x2  expires in", "(id " + p3.ID() + ")",
	} {
		if !strings.Contains(res.stdout, want) {
			t.Fatalf("inspect --all lacks %q:\n%s", want, res.stdout)
		}
	}
	stats, err := r.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats["keys"] != 0 || stats["scan"] == 0 {
		t.Fatalf("server ran %d KEYS and %d SCAN", stats["keys"], stats["scan"])
	}

	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "--match", "all:s*", "--json")
	wantCode(t, res, 0)
	var got []listedState
	decodeStrict(t, res.stdout, &got, "type", "name", "locked", "kind", "mode", "holders", "ttl_ms", "token",
		"waiters", "waiting_writers", "leader", "permits", "taken", "free", "count")
	if len(got) != 1 || got[0].Type != "semaphore" || got[0].Permits != 3 || len(got[0].Holders) != 2 || got[0].Taken != 3 || got[0].Free != 0 {
		t.Fatalf("--match all:s* --json: %+v", got)
	}
	for _, h := range got[0].Holders {
		if want := map[string]int64{p.ID(): 1, p3.ID(): 2}[h.Owner]; h.Count != want || h.TTLms <= 0 {
			t.Fatalf("--match all:s* --json: holder %+v, want count %d", h, want)
		}
	}

	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "--match", "all:[bl][ia]*", "--json")
	wantCode(t, res, 0)
	got = nil
	decodeStrict(t, res.stdout, &got, "type", "name", "locked", "kind", "mode", "holders", "ttl_ms", "token",
		"waiters", "waiting_writers", "leader", "permits", "taken", "free", "count")
	if len(got) != 2 || got[0].Type != "latch" || got[0].Name != "all:latch" || got[0].Count != 2 || !got[0].Locked ||
		got[0].TTLms <= 0 || got[0].TTLms > time.Minute.Milliseconds() {
		t.Fatalf("--match all:[bl][ia]* --json: latch %+v", got)
	}
	if s := got[1]; s.Type != "semaphore" || s.Permits != 10 || s.Taken != 4 || s.Free != 6 || len(s.Holders) != 1 || s.Holders[0].Count != 4 {
		t.Fatalf("--match all:[bl][ia]* --json: semaphore %+v", s)
	}

	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "all:mutex")
	wantCode(t, res, exitUsage)
	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--match", "x", "all:mutex")
	wantCode(t, res, exitUsage)
}

// inspect --all --match with the review's pattern (eight stars before a
// 'b' that never comes) against a 300-byte lock name ends, and says nothing
// matched; with the 'b' dropped it lists the lock. The run's 60 s bound is
// a liveness bound (the listing takes milliseconds): the old backtracking
// matcher never ended. A pattern over the limit is refused before any
// network call (the Redis here is unreachable), and --timeout bounds the
// listing.
func TestInspectAllPathologicalMatch(t *testing.T) {
	r := testenv.StartRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	name := strings.Repeat("a", 300)
	m := c.Mutex(name)
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(ctx)
	res := dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "--match", "*a*a*a*a*a*a*a*a*b")
	wantCode(t, res, 0)
	if res.stdout != "no locks, elections, semaphores or latches found\n" {
		t.Fatalf("no match: %q", res.stdout)
	}
	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "--match", "*a*a*a*a*a*a*a*a*")
	wantCode(t, res, 0)
	if !strings.HasPrefix(res.stdout, "lock "+shortName(name)+": locked") {
		t.Fatalf("match: %q", res.stdout)
	}
	res = dlockRun(t, nil, "--redis", "redis://127.0.0.1:1", "inspect", "--all", "--match", strings.Repeat("*", 4097))
	wantCode(t, res, exitUsage)
	usageErr(t, res, "--match is 4097 bytes, the limit is 4096")
	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "--timeout", "1ns")
	wantCode(t, res, exitFailure)
	oneLineErr(t, res, "no answer from Redis within 1ns (raise --timeout)")
	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "--timeout", "0s")
	wantCode(t, res, exitUsage)
	usageErr(t, res, "--timeout must be positive")
}

// inspect --all lists what is locked now and never dlock's own keys: not
// the record of long holds beside a renewed lock (dlock:held:{name}, which
// it showed as a second locked lock), and not the names used in the last
// 24 h that only a fencing counter remembers, which --history adds as "not
// locked". inspect with neither NAME nor --all says what it needs.
func TestInspectAllOwnKeysAndHistory(t *testing.T) {
	r := testenv.StartRedis(t)
	c := newClient(t, r, dlock.WithWatchdogTimeout(1500*time.Millisecond))
	ctx := ctxT(t)
	m := c.Mutex("own:held")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(ctx)
	rdb := r.NewClient(t)
	for rdb.Exists(ctx, "dlock:held:{own:held}").Val() != 1 { // the first renewal writes it
		if ctx.Err() != nil {
			t.Fatal("no record of long holds")
		}
		time.Sleep(10 * time.Millisecond)
	}
	was := c.Mutex("own:was-held")
	if err := was.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := was.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	res := dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all")
	wantCode(t, res, 0)
	if got := strings.Count("\n"+res.stdout, "\nlock "); got != 1 || !strings.Contains(res.stdout, "lock own:held: locked") {
		t.Fatalf("inspect --all: want the one held lock:\n%s", res.stdout)
	}
	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "--history")
	wantCode(t, res, 0)
	if !strings.Contains(res.stdout, "lock own:held: locked") || !strings.Contains(res.stdout, "lock own:was-held: not locked") ||
		strings.Contains(res.stdout, "dlock:held") {
		t.Fatalf("inspect --all --history: want the held lock and the released one:\n%s", res.stdout)
	}

	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--history", "own:held")
	wantCode(t, res, exitUsage)
	usageErr(t, res, "--history goes with --all")
	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect")
	wantCode(t, res, exitUsage)
	usageErr(t, res, "inspect needs a lock NAME, or --all to list every lock")
}

// A hold renewed once reads "1 renewal", not "1 renewals".
func TestInspectRenewalsCount(t *testing.T) {
	for n, want := range map[int64]string{1: "held for 10s, 1 renewal ", 2: "held for 20s, 2 renewals "} {
		var b strings.Builder
		printState(&b, lockState{Name: "x", Locked: true, Holders: []holder{{Owner: "o:1", Count: 1, HeldForMs: n * 10000, Renewals: n}}})
		if !strings.Contains(b.String(), want) {
			t.Errorf("%d renewals: %q lacks %q", n, b.String(), want)
		}
	}
}
