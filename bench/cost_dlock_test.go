//go:build !nodlock

package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// TestCostSmall runs scenario (f) at a small size for dlock (renews its
// holds) and spin-1ms (does not): the code paths and the accounting.
func TestCostSmall(t *testing.T) {
	srv := startTestRedis(t)
	ctx := testCtx(t)
	libs, unknown := selectLibs("dlock,spin-1ms")
	if len(unknown) > 0 {
		t.Fatal(unknown)
	}
	cfg := CostConfig{W: []int{1, 2, 4}, Grants: 8, Hold: time.Millisecond,
		Held: 600, HeldTTL: 300 * time.Millisecond, HeldFor: 300 * time.Millisecond,
		P: []int{1, 3}, WaitFor: 300 * time.Millisecond, WaitStart: 100 * time.Millisecond}
	var problems []string
	res := runCost(ctx, srv, libs, cfg, 1, io.Discard, func(f string, a ...any) { problems = append(problems, f) })
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	if len(res.Grant) != 6 {
		t.Fatalf("%d per-grant groups, want 2 libs × 3 W", len(res.Grant))
	}
	for _, g := range res.Grant {
		if g.Grants != g.W*max(1, cfg.Grants/g.W) || g.CPUGrantUs.Median <= 0 || g.Violations != 0 {
			t.Errorf("per grant %s W=%d: %+v", g.Lib, g.W, g)
		}
	}
	if len(res.Held) != 1 || res.Held[0].Lib != "dlock" {
		t.Fatalf("held runs %+v, want dlock's only", res.Held)
	}
	h := res.Held[0]
	// Renewals happened, kept every lock, and were batched: 600 locks in
	// far fewer calls than locks per period (dlock batches up to 500).
	if h.CmdsPerLockPeriod <= 0 || h.CPUPerLockPeriodUs <= 0 || h.KeysBefore < int64(cfg.Held) || h.KeysAfter < h.KeysBefore {
		t.Errorf("held: %+v", h)
	}
	if h.CallsPerPeriod <= 0 || h.CallsPerPeriod > 20 {
		t.Errorf("%.1f calls per renewal period for %d locks: not batched?", h.CallsPerPeriod, cfg.Held)
	}
	if len(res.Waiting) != 4 {
		t.Fatalf("%d waiting runs, want 4", len(res.Waiting))
	}
	rate := map[string]float64{}
	for _, w := range res.Waiting {
		// dlock's waiters may send nothing in 300 ms (they re-check every 3 s).
		if w.Granted != 0 || w.CPUPerProcSecUs <= 0 {
			t.Errorf("waiting: %+v", w)
		}
		rate[w.Lib] += w.CmdsPerProcSec
	}
	// A 1 ms poll costs hundreds of commands per waiter per second; dlock's
	// waiters sit on pub/sub.
	if rate["spin-1ms"] < 100 || rate["dlock"] > rate["spin-1ms"]/10 {
		t.Errorf("commands per waiting process per second: %v", rate)
	}
	var b bytes.Buffer
	writeCost(&b, &Report{Meta: Meta{Reps: 1}, Cost: res})
	if !strings.Contains(b.String(), "| spin-1ms | ≈ ") || !strings.Contains(b.String(), "no renewal (fixed TTL)") {
		t.Errorf("cost section:\n%s", b.String())
	}
}
