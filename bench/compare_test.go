package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRun is one bench process of compare.sh: the figures issue 21 reads,
// per lib.
type fakeRun struct {
	pairs16, cmds100 float64
}

// writeCompareRun writes runs/<dir>/results.json as the bench does (the
// same Go types, so the script is tested against the real field names).
func writeCompareRun(t *testing.T, runs, dir string, libs map[string]fakeRun) {
	t.Helper()
	rep := &Report{}
	for lib, v := range libs {
		rep.Uncontended = append(rep.Uncontended,
			UncontendedGroup{Lib: lib, G: 1, Runs: []UncontendedRun{{Lib: lib, G: 1, PairsPerS: 5000, PairP50Us: 100, PairPings: 2, CPUPairUs: 30}}},
			UncontendedGroup{Lib: lib, G: 16, Runs: []UncontendedRun{{Lib: lib, G: 16, PairsPerS: v.pairs16, PairP50Us: 500, CPUPairUs: 20}}})
		rep.Hotkey = append(rep.Hotkey,
			HotkeyGroup{Lib: lib, W: 100, Mode: "separate", Runs: []HotkeyRun{{Lib: lib, W: 100, Mode: "separate", CmdsPerGrant: v.cmds100, CPUGrantUs: 200, GapP50Ms: 0.4}}},
			// A shared-mode run must not count as the separate figure.
			HotkeyGroup{Lib: lib, W: 100, Mode: "shared", Runs: []HotkeyRun{{Lib: lib, W: 100, Mode: "shared", CmdsPerGrant: 1, CPUGrantUs: 1, GapP50Ms: 0.001}}})
	}
	if err := os.MkdirAll(filepath.Join(runs, dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(runs, dir, "results.json"), rep); err != nil {
		t.Fatal(err)
	}
}

func compareSummary(t *testing.T, runs string) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found (compare.sh needs it too)")
	}
	out, err := exec.Command(py, "compare_summary.py", runs).CombinedOutput()
	if err != nil {
		t.Fatalf("compare_summary.py: %v\n%s", err, out)
	}
	return string(out)
}

// row returns the markdown row that starts with prefix.
func row(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no row %q in:\n%s", prefix, out)
	return ""
}

// PEERS mode: the best peer is chosen per figure, by its median over
// blocks, in the direction the figure is better, among the peers the
// figure names; the ratios are dlock's medians over it.
func TestCompareSummaryBestPeer(t *testing.T) {
	runs := t.TempDir()
	// spin-1ms is the best go-redis peer by median (150), though not by
	// mean (103 against redsync's 110); rueidislock is faster still but is
	// not a go-redis peer, and has the fewest commands per grant.
	spin1 := []float64{150, 10, 150}
	for i, p := range []string{"1", "2", "3"} {
		writeCompareRun(t, runs, p+"-before", map[string]fakeRun{"dlock": {pairs16: 120, cmds100: 25}})
		writeCompareRun(t, runs, p+"-after", map[string]fakeRun{"dlock": {pairs16: 300, cmds100: 10}})
		writeCompareRun(t, runs, p+"-peer_redsync", map[string]fakeRun{"redsync": {pairs16: 110, cmds100: 160}})
		writeCompareRun(t, runs, p+"-peer_spin-1ms", map[string]fakeRun{"spin-1ms": {pairs16: spin1[i], cmds100: 70}})
		writeCompareRun(t, runs, p+"-peer_rueidislock", map[string]fakeRun{"rueidislock": {pairs16: 200, cmds100: 50}})
	}
	out := compareSummary(t, runs)

	r := row(t, out, "| 2. G=16 pairs/s vs the best go-redis peer")
	for _, want := range []string{"| higher |", "spin-1ms: 150", "**0.800**", "**2.000**", "| 3 |"} {
		if !strings.Contains(r, want) {
			t.Errorf("go-redis row lacks %q:\n%s", want, r)
		}
	}
	r = row(t, out, "| 2. G=16 pairs/s vs rueidislock")
	if !strings.Contains(r, "rueidislock: 200") || !strings.Contains(r, "**0.600**") || !strings.Contains(r, "**1.500**") {
		t.Errorf("rueidislock row: %s", r)
	}
	r = row(t, out, "| 3. W=100 separate: cmds/grant")
	if !strings.Contains(r, "| lower |") || !strings.Contains(r, "rueidislock: 50.0") || !strings.Contains(r, "**0.500**") || !strings.Contains(r, "**0.200**") {
		t.Errorf("cmds/grant row: %s", r)
	}
	// Peers ran on one side only: the before/after table has dlock alone.
	if strings.Contains(out, "| W=100 cmds/grant | redsync") {
		t.Errorf("a peer of one side only in the before/after table:\n%s", out)
	}
	r = row(t, out, "| W=100 cmds/grant | dlock")
	if !strings.Contains(r, "**0.400**") {
		t.Errorf("after/before of dlock's cmds/grant, want 10/25: %s", r)
	}
}

// The default mode (one control peer in both binaries' runs) keeps its
// table, and the peer's runs of both sides make its median.
func TestCompareSummaryControlPeer(t *testing.T) {
	runs := t.TempDir()
	writeCompareRun(t, runs, "1-before", map[string]fakeRun{"dlock": {pairs16: 100, cmds100: 20}, "rueidislock": {pairs16: 190, cmds100: 50}})
	writeCompareRun(t, runs, "1-after", map[string]fakeRun{"dlock": {pairs16: 200, cmds100: 20}, "rueidislock": {pairs16: 210, cmds100: 50}})
	out := compareSummary(t, runs)
	if r := row(t, out, "| G=16 pairs/s | rueidislock"); !strings.Contains(r, "**1.105**") {
		t.Errorf("control peer's after/before, want 210/190: %s", r)
	}
	// rueidislock's block value is the mean of its two runs, 200.
	if r := row(t, out, "| 2. G=16 pairs/s vs rueidislock"); !strings.Contains(r, "rueidislock: 200") || !strings.Contains(r, "**0.500**") || !strings.Contains(r, "**1.000**") {
		t.Errorf("vs rueidislock: %s", r)
	}
	// No go-redis peer ran: no such row.
	if strings.Contains(out, "best go-redis peer") {
		t.Errorf("a go-redis row without go-redis peers:\n%s", out)
	}
}
