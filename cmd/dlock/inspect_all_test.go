package main

import (
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// inspect --all lists the locks, elections and semaphores of a Redis (by
// SCAN, never KEYS), with holders, TTLs and waiters, as text and JSON, and
// --match filters by name.
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
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}

	res := dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all")
	wantCode(t, res, 0)
	for _, want := range []string{
		`election all:leader: leader "host-a", expires in`,
		"lock all:mutex: locked, expires in",
		"semaphore all:sem: 3 of 3 permits taken",
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
		"waiters", "waiting_writers", "leader", "permits")
	if len(got) != 1 || got[0].Type != "semaphore" || got[0].Permits != 3 || len(got[0].Holders) != 2 {
		t.Fatalf("--match all:s* --json: %+v", got)
	}
	for _, h := range got[0].Holders {
		if want := map[string]int64{p.ID(): 1, p3.ID(): 2}[h.Owner]; h.Count != want || h.TTLms <= 0 {
			t.Fatalf("--match all:s* --json: holder %+v, want count %d", h, want)
		}
	}

	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "all:mutex")
	wantCode(t, res, exitUsage)
	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--match", "x", "all:mutex")
	wantCode(t, res, exitUsage)
}
