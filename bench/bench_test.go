package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Every peer closes cleanly (go-redis pools, rueidis pipes, redsync and
// redislock have no goroutines of their own), so no goroutine is ignored.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startTestRedis starts a private redis-server for one test.
func startTestRedis(t testing.TB) *redisServer {
	t.Helper()
	bin := findBin("", "redis-server")
	if bin == "" {
		t.Fatal("redis-server not found in PATH or /usr/bin (Debian: apt-get install redis-server)")
	}
	srv, err := startRedis(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if srv.Port == 6379 {
		t.Fatal("the bench must never use port 6379")
	}
	return srv
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// brokenLib "locks" without locking: the harness must catch it.
type brokenLib struct{}

func (brokenLib) Name() string                     { return "broken" }
func (brokenLib) NewClient(string) (Client, error) { return brokenClient{}, nil }

type brokenClient struct{}

func (brokenClient) Acquire(ctx context.Context, _ string) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, ctx.Err()
}

func (brokenClient) Close() error { return nil }

func TestHotkeyEveryLib(t *testing.T) {
	srv := startTestRedis(t)
	ctx := testCtx(t)
	const W, K = 3, 5
	for _, lib := range registry {
		for _, shared := range []bool{false, true} {
			cfg := HotkeyConfig{W: W, K: K, Hold: 2 * time.Millisecond, Shared: shared}
			t.Run(lib.Name()+"/"+cfg.Mode(), func(t *testing.T) {
				r, err := runHotkey(ctx, srv, lib, cfg, 1)
				if err != nil {
					t.Fatal(err)
				}
				if r.Grants != W*K || r.Expected != W*K {
					t.Errorf("grants = %d (expected %d), want %d; first error %q", r.Grants, r.Expected, W*K, r.FirstError)
				}
				if r.Violations != 0 || r.Overlaps != 0 || r.MaxInCS != 1 {
					t.Errorf("violations %d overlaps %d max in CS %d, want 0 0 1", r.Violations, r.Overlaps, r.MaxInCS)
				}
				if r.AcquireErrors != 0 || r.ReleaseErrors != 0 {
					t.Errorf("errors: acquire %d release %d (%s)", r.AcquireErrors, r.ReleaseErrors, r.FirstError)
				}
				// At least the winning SET and the release's DEL per grant.
				if r.CmdsPerGrant < 2 || r.Commands <= 0 || r.CPUGrantUs <= 0 {
					t.Errorf("commands per grant = %v (total %d), want >= 2, and some Redis CPU (%v µs per grant)", r.CmdsPerGrant, r.Commands, r.CPUGrantUs)
				}
				if r.CommandStats["config|resetstat"] != 0 || r.CommandStats["info"] != 0 {
					t.Errorf("the bench's own RESETSTAT/INFO leaked into the counts: %v", r.CommandStats)
				}
				if len(r.CommandUsec) == 0 || r.CommandUsec["info"] != 0 || r.CommandUsec["config|resetstat"] != 0 {
					t.Errorf("time in commands: %v, want some, and none of the bench's own", r.CommandUsec)
				}
				for c := range r.CommandUsec {
					if r.CommandStats[c] == 0 {
						t.Errorf("time in %s, which did not run: %v", c, r.CommandUsec)
					}
				}
				if r.GapP50Ms <= 0 || r.WaitP99Ms < r.WaitP50Ms || r.GapP99Ms < r.GapP50Ms {
					t.Errorf("implausible latencies: gap p50 %v p99 %v, wait p50 %v p99 %v", r.GapP50Ms, r.GapP99Ms, r.WaitP50Ms, r.WaitP99Ms)
				}
				if r.HoldMeanMs < 2 {
					t.Errorf("mean hold %v ms, want >= 2", r.HoldMeanMs)
				}
				if p := r.Problems(); len(p) != 0 {
					t.Errorf("problems: %v", p)
				}
			})
		}
	}
}

func TestBrokenLockIsDetected(t *testing.T) {
	srv := startTestRedis(t)
	ctx := testCtx(t)
	r, err := runHotkey(ctx, srv, brokenLib{}, HotkeyConfig{W: 3, K: 5, Hold: 5 * time.Millisecond}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Violations == 0 || r.MaxInCS < 2 {
		t.Fatalf("a lock that does not lock went undetected: violations %d, max in CS %d", r.Violations, r.MaxInCS)
	}
	if r.Overlaps == 0 {
		t.Errorf("overlap check missed the broken lock")
	}
	if p := r.Problems(); len(p) == 0 || !strings.Contains(p[0], "MUTUAL EXCLUSION VIOLATED") {
		t.Errorf("Problems() = %v, want an exclusion violation", p)
	}

	// The suite reports it as an error (non-empty Problems => exit 1), in
	// the output files too.
	var progress bytes.Buffer
	rep := runSuite(ctx, srv, []Lib{brokenLib{}}, SuiteConfig{Reps: 1, Hotkey: true, HotkeyW: []int{3}, HotkeyGrants: 15, HotkeyModes: []bool{false}, Hold: 5 * time.Millisecond}, &progress)
	if len(rep.Problems) == 0 || !strings.Contains(progress.String(), "ERROR:") {
		t.Fatalf("suite did not report the violation; problems %v, progress:\n%s", rep.Problems, progress.String())
	}
	var md bytes.Buffer
	writeMarkdown(&md, rep)
	if !strings.Contains(md.String(), "MUTUAL EXCLUSION VIOLATED") {
		t.Errorf("RESULTS.md does not show the violation:\n%s", md.String())
	}
}

func TestUncontendedEveryLib(t *testing.T) {
	srv := startTestRedis(t)
	ctx := testCtx(t)
	for _, lib := range registry {
		t.Run(lib.Name(), func(t *testing.T) {
			r, err := runUncontended(ctx, srv, lib, UncontendedConfig{G: 2, Duration: 100 * time.Millisecond}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Pairs <= 0 || r.PairsPerS <= 0 || r.AllocsPair <= 0 || r.CmdsPair < 2 || r.PairP50Us <= 0 || r.CPUPairUs <= 0 {
				t.Errorf("implausible run: %+v", r)
			}
			if p := r.Problems(); len(p) != 0 {
				t.Errorf("problems: %v", p)
			}
			if r.PingP50Us != 0 {
				t.Errorf("G=2 run measured PINGs: %+v", r)
			}
			// G=1: the pair is compared with PINGs through the lib's own client.
			one, err := runUncontended(ctx, srv, lib, UncontendedConfig{G: 1, Duration: 50 * time.Millisecond, PingFor: 30 * time.Millisecond}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if one.PingP50Us <= 0 || one.PairPings <= 0 {
				t.Errorf("G=1 run without its PING comparison: %+v", one)
			}
		})
	}
}

func TestSinceResetCountsExactly(t *testing.T) {
	srv := startTestRedis(t)
	ctx := testCtx(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil { // dial before the reset
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		if err := srv.ResetStats(ctx); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if err := rdb.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := rdb.Eval(ctx, `redis.call("SET", KEYS[1], "v"); return redis.call("GET", KEYS[1])`, []string{"k"}).Err(); err != nil {
			t.Fatal(err)
		}
		use, err := srv.SinceReset(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// 5 PING + EVAL + the SET and GET inside the script.
		cmds := use.Cmds
		if use.Total != 8 || cmds["ping"] != 5 || cmds["eval"] != 1 || cmds["set"] != 1 || cmds["get"] != 1 {
			t.Fatalf("round %d: total %d, %v; want 8 (ping 5, eval 1, set 1, get 1)", round, use.Total, cmds)
		}
		// Some CPU, and less than the whole test's wall time could hold.
		if use.CPU < 0 || use.CPU > 10*time.Second {
			t.Fatalf("round %d: main-thread CPU %v", round, use.CPU)
		}
	}
}

func TestCeiling(t *testing.T) {
	srv := startTestRedis(t)
	ctx := testCtx(t)
	cfg := CeilingConfig{PingDuration: 100 * time.Millisecond, BenchBin: findBin("", "redis-benchmark"), BenchN: 2000, BenchClients: []int{1, 4}}
	if cfg.BenchBin == "" {
		t.Log("redis-benchmark not found: testing the Go PING part only")
	}
	r, err := runCeiling(ctx, srv, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.GoPings == 0 || r.GoPingP50Us <= 0 || r.GoPingP99Us < r.GoPingP50Us {
		t.Errorf("implausible Go PING: %+v", r)
	}
	if cfg.BenchBin != "" {
		if len(r.Bench) != 6 {
			t.Fatalf("redis-benchmark lines = %+v, want 3 tests x 2 client counts", r.Bench)
		}
		for _, b := range r.Bench {
			if b.RPS <= 0 || b.P50Ms <= 0 {
				t.Errorf("bad line %+v", b)
			}
		}
	}
}

func TestParseRedisBenchmark(t *testing.T) {
	out := "PING_INLINE: rps=0.0 (overall: 7000.0) avg_msec=0.071 (overall: 0.071)\r          \r" +
		"PING_INLINE: 13063.36 requests per second, p50=0.071 msec                    \n" +
		"PING_MBULK: rps=12084.0 (overall: 12063.7) avg_msec=0.078\r" +
		"PING_MBULK: 13586.96 requests per second, p50=0.071 msec\n" +
		"SET: 13642.57 requests per second, p50=0.079 msec\n"
	got := parseRedisBenchmark(out, 16)
	want := []BenchLine{{16, "PING_INLINE", 13063.36, 0.071}, {16, "PING_MBULK", 13586.96, 0.071}, {16, "SET", 13642.57, 0.079}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseMainThreadCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\nused_cpu_sys_main_thread:0.250000\r\nused_cpu_user_main_thread:1.125000\r\n"
	got, err := parseMainThreadCPU(info)
	if err != nil || got != 1375*time.Millisecond {
		t.Fatalf("got %v, %v; want 1.375s", got, err)
	}
	if _, err := parseMainThreadCPU("# CPU\r\nused_cpu_sys:1.5\r\n"); err == nil {
		t.Fatal("no error for an INFO without the main-thread fields")
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_set:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["set"] != 12 || got["client|setinfo"] != 2 {
		t.Fatalf("got %v", got)
	}
	calls, usec, err := parseCommandTimes(info)
	if err != nil || calls["set"] != 12 || usec["set"] != 30 || usec["client|setinfo"] != 3 || len(usec) != 2 {
		t.Fatalf("parseCommandTimes: %v %v %v", calls, usec, err)
	}
}

func TestHistQuantiles(t *testing.T) {
	h := new(hist)
	var xs []time.Duration
	for i := 1; i <= 10000; i++ {
		d := time.Duration(i) * time.Microsecond
		h.Record(d)
		xs = append(xs, d)
	}
	for _, q := range []float64{0.01, 0.5, 0.99, 1} {
		exact := quantile(xs, q)
		got := h.Quantile(q)
		if rel := float64(got-exact) / float64(exact); rel > 0.02 || rel < -0.02 {
			t.Errorf("q%.2f: hist %v, exact %v", q, got, exact)
		}
	}
	for v := int64(0); v < 1<<20; v = v*3/2 + 1 {
		if got := histValue(histIndex(v)); float64(got-v) > 0.02*float64(v)+1 || float64(v-got) > 0.02*float64(v)+1 {
			t.Fatalf("bucket of %d has value %d", v, got)
		}
	}
}

func TestRotate(t *testing.T) {
	libs := []Lib{spinLib{1}, spinLib{2}, spinLib{3}}
	for i := range 3 {
		r := rotate(libs, i)
		if len(r) != 3 || r[0] != libs[i] {
			t.Fatalf("rotate(%d) = %v", i, names(r))
		}
	}
}

func TestSuiteWritesOutputs(t *testing.T) {
	srv := startTestRedis(t)
	ctx := testCtx(t)
	libs, unknown := selectLibs("spin-1ms,redislock")
	if len(unknown) != 0 || len(libs) != 2 {
		t.Fatalf("selectLibs: %v %v", names(libs), unknown)
	}
	cfg := SuiteConfig{
		Reps:        2,
		Uncontended: true, UncontendedG: []int{1}, UncontendedD: 50 * time.Millisecond,
		Hotkey: true, HotkeyW: []int{3}, HotkeyGrants: 9, HotkeyModes: []bool{false, true}, Hold: time.Millisecond,
		Ceiling: true, CeilCfg: CeilingConfig{PingDuration: 50 * time.Millisecond, BenchN: 500, BenchClients: []int{1}, BenchBin: findBin("", "redis-benchmark")}, BenchReps: 1,
	}
	var progress bytes.Buffer
	rep := runSuite(ctx, srv, libs, cfg, &progress)
	if len(rep.Problems) != 0 {
		t.Fatalf("problems: %v\n%s", rep.Problems, progress.String())
	}
	if len(rep.Hotkey) != 4 || len(rep.Uncontended) != 2 || rep.Ceiling == nil {
		t.Fatalf("groups: hotkey %d uncontended %d ceiling %v", len(rep.Hotkey), len(rep.Uncontended), rep.Ceiling != nil)
	}
	for _, g := range rep.Hotkey {
		if len(g.Runs) != 2 || g.Grants != 2*9 || g.CmdsPerGrant.Median <= 0 || g.CmdsPerGrant.Min > g.CmdsPerGrant.Max {
			t.Errorf("group %s W=%d %s: %d runs, %d grants, cmds %+v", g.Lib, g.W, g.Mode, len(g.Runs), g.Grants, g.CmdsPerGrant)
		}
	}
	// Rotating order: rep 1 starts with spin-1ms, rep 2 with redislock.
	if !strings.Contains(progress.String(), "spin-1ms     rep 1/2") || strings.Index(progress.String(), "redislock    rep 2/2") > strings.Index(progress.String(), "spin-1ms     rep 2/2") {
		t.Errorf("libs not rotated between reps:\n%s", progress.String())
	}
	dir := t.TempDir()
	if err := writeOutputs(dir, rep); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "RESULTS.md"))
	for _, want := range []string{"CPU cores", "Redis | " + srv.Version, "W=3, K=3, separate", "spin-1ms", "redislock", "v0.9.4", "pairs/s", "PING"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("RESULTS.md lacks %q", want)
		}
	}
	// A second run keeps the hand-written tail after the marker, and only it.
	kept := "\n" + keptMarker + "\n\n## Before/after\n\nrecord\n"
	if err := os.WriteFile(filepath.Join(dir, "RESULTS.md"), append(md, kept...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeOutputs(dir, rep); err != nil {
		t.Fatal(err)
	}
	if md2, _ := os.ReadFile(filepath.Join(dir, "RESULTS.md")); string(md2) != string(md)+kept {
		t.Errorf("rewritten RESULTS.md does not keep exactly the tail: %d bytes, want %d", len(md2), len(md)+len(kept))
	}
	var back Report
	js, _ := os.ReadFile(filepath.Join(dir, "results.json"))
	if err := json.Unmarshal(js, &back); err != nil || len(back.Hotkey) != 4 || back.Meta.NumCPU == 0 {
		t.Errorf("results.json: %v, %d hotkey groups", err, len(back.Hotkey))
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "results.svg"))
	if !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte(">redislock<")) || !bytes.Contains(svg, []byte("</svg>")) {
		t.Errorf("results.svg malformed:\n%s", svg)
	}
}

// A run without -out (what make bench does) writes its files into out/,
// which git ignores, and leaves the tracked RESULTS.md, results.json and
// results.svg of the working directory alone; -out . regenerates them
// (make bench-results). A run of 50 ms of one lib, not a benchmark.
func TestRunWritesToOutByDefault(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	tracked := map[string]string{"RESULTS.md": "# tracked\n", "results.json": "{}\n", "results.svg": "<svg/>\n"}
	for name, body := range tracked {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	quick := []string{"-libs", "spin-1ms", "-scenarios", "uncontended", "-reps", "1", "-duration", "50ms", "-g", "1"}
	var stderr bytes.Buffer
	if code := run(quick, &stderr); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr.String())
	}
	for name, body := range tracked {
		if got, err := os.ReadFile(name); err != nil || string(got) != body {
			t.Errorf("%s was rewritten by a run without -out", name)
		}
		if _, err := os.Stat(filepath.Join("out", name)); err != nil {
			t.Errorf("out/%s: %v", name, err)
		}
	}
	if code := run(append(quick, "-out", "."), &stderr); code != 0 {
		t.Fatalf("run -out .: exit %d\n%s", code, stderr.String())
	}
	if md, err := os.ReadFile("RESULTS.md"); err != nil || !bytes.Contains(md, []byte("spin-1ms")) {
		t.Errorf("-out . did not regenerate RESULTS.md: %v", err)
	}
}
