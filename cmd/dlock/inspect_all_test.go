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
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}

	res := dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all")
	wantCode(t, res, 0)
	for _, want := range []string{
		`election all:leader: leader "host-a", expires in`,
		"lock all:mutex: locked, expires in",
		"semaphore all:sem: 1 of 3 permits taken",
		"  permit  ", "(id " + p.ID() + ")",
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
	if len(got) != 1 || got[0].Type != "semaphore" || got[0].Permits != 3 || len(got[0].Holders) != 1 ||
		got[0].Holders[0].Owner != p.ID() || got[0].Holders[0].TTLms <= 0 {
		t.Fatalf("--match all:s* --json: %+v", got)
	}

	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--all", "all:mutex")
	wantCode(t, res, exitUsage)
	res = dlockRun(t, nil, "--redis", redisURL(r), "inspect", "--match", "x", "all:mutex")
	wantCode(t, res, exitUsage)
}
