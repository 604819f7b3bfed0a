package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestFitLine(t *testing.T) {
	// Points on y = 80 + 2.5x: the fit finds the line, no point off it.
	xs := []float64{1, 2, 5, 10, 20, 50, 100}
	ys := make([]float64, len(xs))
	for i, x := range xs {
		ys[i] = 80 + 2.5*x
	}
	l, err := fitLine(xs, ys)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(l.A-80) > 1e-9 || math.Abs(l.B-2.5) > 1e-9 || l.MaxRelDev > 1e-12 || l.N != 7 {
		t.Fatalf("fit %+v, want A 80 B 2.5 exactly", l)
	}
	if got := l.String("W"); got != "80.0 + 2.50·W" {
		t.Errorf("String = %q", got)
	}
	// One point 20% above the line: least squares moves the line towards
	// it, and the worst point is reported relative to its own value.
	ys[3] *= 1.2 // x=10: 105 -> 126
	l, _ = fitLine(xs, ys)
	if l.MaxRelDev < 0.1 || l.MaxRelDev > 0.2 || l.A <= 80 {
		t.Errorf("with an outlier: %+v", l)
	}
	// A falling line prints its sign once.
	if got := (Line{A: 10, B: -0.5}).String("P"); got != "10.0 − 0.500·P" {
		t.Errorf("String = %q", got)
	}
	for _, bad := range [][2][]float64{{{1}, {1}}, {{3, 3}, {1, 2}}, {{1, 2}, {1}}} {
		if _, err := fitLine(bad[0], bad[1]); err == nil {
			t.Errorf("fitLine(%v, %v): no error", bad[0], bad[1])
		}
	}
}

// The cost model's rows: fits from the medians, "no renewal" for a lib
// without a held-locks run, the per-process rate from the slope over P
// (not the per-P figures, which carry Redis's own background work), and
// dlock's formula.
func TestWriteCost(t *testing.T) {
	hk := func(lib string, w int, cpu float64) HotkeyGroup {
		return HotkeyGroup{Lib: lib, W: w, Mode: "separate", CPUGrantUs: Summary{Median: cpu, Min: cpu, Max: cpu}, CmdsPerGrant: Summary{Median: 10, Min: 10, Max: 10}, Runs: []HotkeyRun{{}}}
	}
	c := &CostResult{Hold: 5, Grants: 200, Config: CostConfigJSON{W: []int{1, 2, 10}, Held: 1000, HeldTTLS: 3, HeldForS: 6, P: []int{10, 100}, WaitForS: 6}}
	// W=1 (no waiter) is off the line and given apart.
	c.Grant = []HotkeyGroup{hk("dlock", 1, 70), hk("dlock", 2, 104), hk("dlock", 10, 120), hk("spin-5ms", 1, 50), hk("spin-5ms", 2, 60), hk("spin-5ms", 10, 140)}
	c.Held = []CostHeldRun{{Lib: "dlock", Locks: 1000, RenewalS: 1, WindowS: 6, CPUPerLockPeriodUs: 5, CPUPerLockSecUs: 5, KeysBefore: 1000, KeysAfter: 1000}}
	// Total CPU per second 1000 + 3·P for dlock: 1300 and 1300 µs/s at
	// P=10, 100 per process 130 and 13, the slope 3.
	c.Waiting = []CostWaitRun{
		{Lib: "dlock", P: 10, WindowS: 6, CPUUs: 6 * 1030, CPUPerProcSecUs: 103},
		{Lib: "dlock", P: 100, WindowS: 6, CPUUs: 6 * 1300, CPUPerProcSecUs: 13},
		{Lib: "spin-5ms", P: 10, WindowS: 6, CPUUs: 6 * 9000, Granted: 1},
		{Lib: "spin-5ms", P: 100, WindowS: 6, CPUUs: 6 * 90000},
	}
	var b bytes.Buffer
	writeCost(&b, &Report{Meta: Meta{Reps: 1}, Cost: c})
	out := b.String()
	for _, want := range []string{
		"| dlock | ≈ 100 + 2.00·W µs (worst point 0% off) | 70.0 µs | 5.00 µs (period 1.00 s; 5.00 µs per lock per second) | 3.00 µs/s",
		"| spin-5ms | ≈ 40.0 + 10.0·W µs (worst point 0% off) | 50.0 µs | no renewal (fixed TTL) | – |", // one valid P point: no line
		"u·70.0 + g·(100 + 2.00·W) + N·5.00/T + P·3.00",
		"**invalid: 1 granted**",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
