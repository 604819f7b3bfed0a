package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report is everything one invocation measured; written as results.json
// and rendered as RESULTS.md and results.svg.
type Report struct {
	Meta        Meta               `json:"meta"`
	Uncontended []UncontendedGroup `json:"uncontended,omitempty"`
	Hotkey      []HotkeyGroup      `json:"hotkey,omitempty"`
	Ceiling     *CeilingGroup      `json:"ceiling,omitempty"`
	Scale       *ScaleResult       `json:"scale,omitempty"`
	Cost        *CostResult        `json:"cost,omitempty"`
	// Problems are invalid runs (exclusion violations first); any entry
	// makes the bench exit non-zero.
	Problems []string `json:"problems,omitempty"`
	Notes    []string `json:"notes,omitempty"`
}

type Meta struct {
	Started      time.Time `json:"started"`
	Finished     time.Time `json:"finished"`
	Command      string    `json:"command"`
	GoVersion    string    `json:"go_version"`
	GOOS         string    `json:"goos"`
	GOARCH       string    `json:"goarch"`
	NumCPU       int       `json:"num_cpu"`
	GOMAXPROCS   int       `json:"gomaxprocs"`
	CPUModel     string    `json:"cpu_model,omitempty"`
	LoadStart    string    `json:"loadavg_start,omitempty"` // /proc/loadavg: other processes share the cores
	LoadEnd      string    `json:"loadavg_end,omitempty"`
	RedisVersion string    `json:"redis_version"`
	RedisArgs    string    `json:"redis_args"`
	Reps         int       `json:"reps"`
	Full         bool      `json:"full"`
	DlockBuilt   bool      `json:"dlock_built"`
	Libs         []LibMeta `json:"libs"`
	Params       Params    `json:"params"`
}

type LibMeta struct {
	Name     string `json:"name"`
	Module   string `json:"module"`
	Version  string `json:"version"`
	Settings string `json:"settings"`
}

type Params struct {
	UncontendedGoroutines []int   `json:"uncontended_goroutines"`
	UncontendedSeconds    float64 `json:"uncontended_seconds"`
	HotkeyW               []int   `json:"hotkey_w"`
	HotkeyGrants          int     `json:"hotkey_target_grants"`
	HoldMs                float64 `json:"hold_ms"`
	PingSeconds           float64 `json:"ping_seconds"`
	BenchN                int     `json:"redis_benchmark_n"`
	BenchClients          []int   `json:"redis_benchmark_clients"`
	BenchReps             int     `json:"redis_benchmark_reps"`
}

type UncontendedGroup struct {
	Lib        string           `json:"lib"`
	G          int              `json:"goroutines"`
	PairsPerS  Summary          `json:"pairs_per_s"`
	PairP50Us  Summary          `json:"pair_p50_us"`
	PairP99Us  Summary          `json:"pair_p99_us"`
	AllocsPair Summary          `json:"allocs_per_pair"`
	BytesPair  Summary          `json:"bytes_per_pair"`
	CmdsPair   Summary          `json:"cmds_per_pair"`
	CPUPairUs  Summary          `json:"redis_cpu_per_pair_us"`
	ClientCPU  Summary          `json:"client_cpu_per_pair_us"`
	PingP50Us  Summary          `json:"ping_p50_us"`
	PairPings  Summary          `json:"pair_p50_in_pings"`
	TopTimes   string           `json:"top_times,omitempty"` // µs per pair in the commands that took the most
	Runs       []UncontendedRun `json:"runs"`
}

type HotkeyGroup struct {
	Lib          string  `json:"lib"`
	W            int     `json:"w"`
	K            int     `json:"k"`
	Mode         string  `json:"mode"`
	WallMs       Summary `json:"wall_ms"`
	IdealMs      float64 `json:"ideal_ms"`
	Efficiency   Summary `json:"efficiency"`
	WaitP50Ms    Summary `json:"wait_p50_ms"`
	WaitP99Ms    Summary `json:"wait_p99_ms"`
	GapP50Ms     Summary `json:"gap_p50_ms"`
	GapP99Ms     Summary `json:"gap_p99_ms"`
	CmdsPerGrant Summary `json:"cmds_per_grant"`
	CPUGrantUs   Summary `json:"redis_cpu_per_grant_us"`
	Grants       int     `json:"grants"` // summed over reps
	Violations   int64   `json:"violations"`
	Rewaits      int64   `json:"adapter_rewaits"` // summed over reps
	TopCommands  string  `json:"top_commands"`
	// TopTimes is the commands that took Redis the most time, in µs per
	// grant ("" when not measured).
	TopTimes string      `json:"top_times,omitempty"`
	Runs     []HotkeyRun `json:"runs"`
}

type CeilingGroup struct {
	GoPingP50Us Summary        `json:"go_ping_p50_us"`
	GoPingP99Us Summary        `json:"go_ping_p99_us"`
	GoPingPerS  Summary        `json:"go_pings_per_s"`
	Bench       []BenchSummary `json:"redis_benchmark"`
	Runs        []CeilingRun   `json:"runs"`
}

type BenchSummary struct {
	Clients int     `json:"clients"`
	Test    string  `json:"test"`
	RPS     Summary `json:"rps"`
	P50Ms   Summary `json:"p50_ms"`
}

// ScaleResult is scenario (d) (dlock only, -full; absent with -tags nodlock).
type ScaleResult struct {
	Lib string `json:"lib"`
	// Locks held by one Client under a short watchdog (100,000 by default).
	HeldLocks          int              `json:"held_locks"`
	WatchdogS          float64          `json:"watchdog_s"`
	RenewalPeriodS     float64          `json:"renewal_period_s"`
	MeasuredS          float64          `json:"measured_s"`
	HeldCommands       int64            `json:"held_commands"`
	CmdsPerPeriod      float64          `json:"cmds_per_renewal_period"`
	CmdsPerLockPeriod  float64          `json:"cmds_per_lock_per_renewal_period"`
	CPUPerLockPeriodUs float64          `json:"redis_cpu_per_lock_per_renewal_period_us"`
	HeldCommandStats   map[string]int64 `json:"held_command_stats"`
	KeysAliveAfter     int64            `json:"keys_alive_after"`
	AcquireAllSeconds  float64          `json:"acquire_all_s"`
	Waiters            int              `json:"waiters"`
	Names              int              `json:"names"`
	HeapPerWaiterBytes float64          `json:"heap_per_waiter_bytes"`
	// StackPerWaiterBytes is the goroutine stack memory per waiter (the
	// harness's own goroutine included).
	StackPerWaiterBytes float64 `json:"stack_per_waiter_bytes"`
	GoroutinesPerWaiter float64 `json:"goroutines_per_waiter"`
	WakeP50Ms           float64 `json:"wake_p50_ms"`
	WakeP99Ms           float64 `json:"wake_p99_ms"`
	WakeMaxMs           float64 `json:"wake_max_ms"`
	DrainSeconds        float64 `json:"drain_seconds"`
	DrainCmdsPerGrant   float64 `json:"drain_cmds_per_grant"`
	DrainCPUPerGrantUs  float64 `json:"drain_redis_cpu_per_grant_us"`
	Grants              int     `json:"grants"`
	Violations          int64   `json:"violations"`
	Errors              int64   `json:"errors"`
	FirstError          string  `json:"first_error,omitempty"`
}

func groupUncontended(runs []UncontendedRun, order []string) []UncontendedGroup {
	type key struct {
		lib string
		g   int
	}
	m := map[key][]UncontendedRun{}
	for _, r := range runs {
		k := key{r.Lib, r.G}
		m[k] = append(m[k], r)
	}
	var out []UncontendedGroup
	for k, rs := range m {
		slices.SortFunc(rs, func(a, b UncontendedRun) int { return a.Rep - b.Rep })
		pick := func(f func(UncontendedRun) float64) Summary {
			var xs []float64
			for _, r := range rs {
				xs = append(xs, f(r))
			}
			return summarize(xs)
		}
		usec, pairs := map[string]int64{}, int64(0)
		for _, r := range rs {
			pairs += r.Pairs
			for c, n := range r.CommandUsec {
				usec[c] += n
			}
		}
		out = append(out, UncontendedGroup{
			Lib: k.lib, G: k.g, Runs: rs, TopTimes: topCommands(usec, int(pairs), 2),
			PairsPerS:  pick(func(r UncontendedRun) float64 { return r.PairsPerS }),
			PairP50Us:  pick(func(r UncontendedRun) float64 { return r.PairP50Us }),
			PairP99Us:  pick(func(r UncontendedRun) float64 { return r.PairP99Us }),
			AllocsPair: pick(func(r UncontendedRun) float64 { return r.AllocsPair }),
			BytesPair:  pick(func(r UncontendedRun) float64 { return r.BytesPair }),
			CmdsPair:   pick(func(r UncontendedRun) float64 { return r.CmdsPair }),
			CPUPairUs:  pick(func(r UncontendedRun) float64 { return r.CPUPairUs }),
			ClientCPU:  pick(func(r UncontendedRun) float64 { return r.ClientCPUPairUs }),
			PingP50Us:  pick(func(r UncontendedRun) float64 { return r.PingP50Us }),
			PairPings:  pick(func(r UncontendedRun) float64 { return r.PairPings }),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].G != out[j].G {
			return out[i].G < out[j].G
		}
		return slices.Index(order, out[i].Lib) < slices.Index(order, out[j].Lib)
	})
	return out
}

func groupHotkey(runs []HotkeyRun, order []string) []HotkeyGroup {
	type key struct {
		lib  string
		w    int
		mode string
	}
	m := map[key][]HotkeyRun{}
	for _, r := range runs {
		k := key{r.Lib, r.W, r.Mode}
		m[k] = append(m[k], r)
	}
	var out []HotkeyGroup
	for k, rs := range m {
		slices.SortFunc(rs, func(a, b HotkeyRun) int { return a.Rep - b.Rep })
		pick := func(f func(HotkeyRun) float64) Summary {
			var xs []float64
			for _, r := range rs {
				xs = append(xs, f(r))
			}
			return summarize(xs)
		}
		g := HotkeyGroup{
			Lib: k.lib, W: k.w, K: rs[0].K, Mode: k.mode, IdealMs: rs[0].IdealMs, Runs: rs,
			WallMs:       pick(func(r HotkeyRun) float64 { return r.WallMs }),
			Efficiency:   pick(func(r HotkeyRun) float64 { return r.Efficiency }),
			WaitP50Ms:    pick(func(r HotkeyRun) float64 { return r.WaitP50Ms }),
			WaitP99Ms:    pick(func(r HotkeyRun) float64 { return r.WaitP99Ms }),
			GapP50Ms:     pick(func(r HotkeyRun) float64 { return r.GapP50Ms }),
			GapP99Ms:     pick(func(r HotkeyRun) float64 { return r.GapP99Ms }),
			CmdsPerGrant: pick(func(r HotkeyRun) float64 { return r.CmdsPerGrant }),
			CPUGrantUs:   pick(func(r HotkeyRun) float64 { return r.CPUGrantUs }),
		}
		total, usec := map[string]int64{}, map[string]int64{}
		for _, r := range rs {
			g.Grants += r.Grants
			g.Violations += r.Violations + int64(r.Overlaps)
			g.Rewaits += r.AdapterRewaits
			for c, n := range r.CommandStats {
				total[c] += n
			}
			for c, n := range r.CommandUsec {
				usec[c] += n
			}
		}
		g.TopCommands = topCommands(total, g.Grants, 3)
		g.TopTimes = topCommands(usec, g.Grants, 3)
		out = append(out, g)
	}
	modeRank := func(m string) int {
		if m == "separate" {
			return 0
		}
		return 1
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.W != b.W {
			return a.W > b.W // W=100 (the headline) first
		}
		if a.Mode != b.Mode {
			return modeRank(a.Mode) < modeRank(b.Mode)
		}
		return slices.Index(order, a.Lib) < slices.Index(order, b.Lib)
	})
	return out
}

// topCommands renders the n commands with the largest counts (calls, or
// µs of Redis time) as "set 3.1, evalsha 1.0", per grant when grants > 0.
func topCommands(total map[string]int64, grants, n int) string {
	names := slices.Collect(maps.Keys(total))
	slices.SortFunc(names, func(a, b string) int {
		if total[a] != total[b] {
			return int(total[b] - total[a])
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for i, c := range names {
		if i == n {
			break
		}
		per := float64(total[c])
		if grants > 0 {
			per /= float64(grants)
		}
		parts = append(parts, fmt.Sprintf("%s %s", c, fmtNum(per)))
	}
	return strings.Join(parts, ", ")
}

func groupCeiling(runs []CeilingRun) *CeilingGroup {
	if len(runs) == 0 {
		return nil
	}
	g := &CeilingGroup{Runs: runs}
	var p50, p99, rate []float64
	type key struct {
		c    int
		test string
	}
	rps := map[key][]float64{}
	lat := map[key][]float64{}
	var keys []key
	for _, r := range runs {
		p50 = append(p50, r.GoPingP50Us)
		p99 = append(p99, r.GoPingP99Us)
		rate = append(rate, r.GoPingPerS)
		for _, b := range r.Bench {
			k := key{b.Clients, b.Test}
			if _, ok := rps[k]; !ok {
				keys = append(keys, k)
			}
			rps[k] = append(rps[k], b.RPS)
			lat[k] = append(lat[k], b.P50Ms)
		}
	}
	g.GoPingP50Us, g.GoPingP99Us, g.GoPingPerS = summarize(p50), summarize(p99), summarize(rate)
	for _, k := range keys {
		g.Bench = append(g.Bench, BenchSummary{Clients: k.c, Test: k.test, RPS: summarize(rps[k]), P50Ms: summarize(lat[k])})
	}
	return g
}

func readJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rep := new(Report)
	return rep, json.Unmarshal(b, rep)
}

func writeJSON(path string, rep *Report) error { return writeJSONValue(path, rep) }

func writeJSONValue(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// fmtNum prints a number with about three significant digits.
func fmtNum(x float64) string {
	ax := math.Abs(x)
	switch {
	case x == 0:
		return "0"
	case ax >= 1000:
		return fmt.Sprintf("%.0f", x)
	case ax >= 100:
		return fmt.Sprintf("%.0f", x)
	case ax >= 10:
		return fmt.Sprintf("%.1f", x)
	case ax >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

// fmtSum prints "median (min–max)", or just the value for a single rep.
func fmtSum(s Summary, reps int) string {
	if reps <= 1 || fmtNum(s.Min) == fmtNum(s.Max) {
		return fmtNum(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtNum(s.Median), fmtNum(s.Min), fmtNum(s.Max))
}

func writeMarkdown(w io.Writer, rep *Report) {
	m := rep.Meta
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# dlock benchmark results\n\n")
	p("Generated by `%s` (bench/, see README.md) on %s, %.0f s.\n", m.Command, m.Started.UTC().Format("2006-01-02 15:04 MST"), m.Finished.Sub(m.Started).Seconds())
	p("Every figure is the **median over %d repetitions, with min–max in parentheses**; libraries run in a rotating order in each repetition.\n\n", m.Reps)
	if len(rep.Problems) > 0 {
		p("## ⚠ Problems\n\n")
		for _, s := range rep.Problems {
			p("- **%s**\n", s)
		}
		p("\n")
	}
	p("## Machine\n\n")
	p("| | |\n|---|---|\n")
	p("| CPU cores (runtime.NumCPU) | %d (GOMAXPROCS %d)%s |\n", m.NumCPU, m.GOMAXPROCS, ifs(m.CPUModel != "", ", "+m.CPUModel))
	p("| OS/arch | %s/%s |\n", m.GOOS, m.GOARCH)
	if m.LoadStart != "" {
		p("| load average (1/5/15 min) at start / end | %s / %s (anything else running shares the cores) |\n", m.LoadStart, m.LoadEnd)
	}
	p("| Go | %s |\n", m.GoVersion)
	p("| Redis | %s, private redis-server on a loopback port, `%s` (same 2 cores as the clients) |\n", m.RedisVersion, m.RedisArgs)
	p("| dlock adapter | %s |\n\n", ifs(m.DlockBuilt, "built in (github.com/dlock-dev/dlock from ../ via replace)", "left out (built with -tags nodlock)"))

	p("## Libraries\n\n| lib | module | version | settings |\n|---|---|---|---|\n")
	for _, l := range m.Libs {
		p("| %s | %s | %s | %s |\n", l.Name, l.Module, l.Version, l.Settings)
	}
	p("\n")

	writeTargets(w, rep)

	if len(rep.Hotkey) > 0 {
		p("## (b) One hot key\n\n")
		p("W goroutines × K acquisitions of one key, each holding it L = %s ms (sleep). *separate* = one Client (connection pool) per goroutine, the distributed case; *shared* = all W goroutines share one Client. Ideal wall time = W·K·L. Hand-off gap = previous holder's release start → next holder's grant. Commands per grant from `INFO commandstats` (includes commands run inside Lua scripts); Redis CPU per grant is the main thread's CPU time (`INFO cpu`) over the run divided by grants; *time in commands* is `INFO commandstats`' usec of the commands that took the most, per grant, where an EVALSHA's time includes the commands its script ran (listed on their own too): what Redis's CPU spent outside them went to reading requests, writing replies, delivering messages and waking up for each request.\n\n", fmtNum(m.Params.HoldMs))
		var last string
		for _, g := range rep.Hotkey {
			section := fmt.Sprintf("W=%d, K=%d, %s", g.W, g.K, g.Mode)
			if section != last {
				last = section
				p("### %s (ideal %s ms)\n\n", section, fmtNum(g.IdealMs))
				p("| lib | cmds/grant | Redis CPU µs/grant | gap p50 ms | gap p99 ms | wait p50 ms | wait p99 ms | wall ms | ideal/wall | violations | top commands per grant | time in commands, µs per grant |\n")
				p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			}
			n := len(g.Runs)
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", g.Lib, fmtSum(g.CmdsPerGrant, n), fmtSum(g.CPUGrantUs, n), fmtSum(g.GapP50Ms, n), fmtSum(g.GapP99Ms, n),
				fmtSum(g.WaitP50Ms, n), fmtSum(g.WaitP99Ms, n), fmtSum(g.WallMs, n), fmtSum(g.Efficiency, n),
				ifs(g.Violations == 0, "0", fmt.Sprintf("**%d**", g.Violations)), g.TopCommands, ifs(g.TopTimes != "", g.TopTimes, "–"))
			if next := nextHotkeySection(rep.Hotkey, g); next {
				p("\n")
				for _, x := range rep.Hotkey {
					if x.W == g.W && x.Mode == g.Mode && x.Rewaits > 0 {
						p("%s: the adapter restarted %d wait(s) that exceeded its bound, over %d grants (see Libraries).\n\n", x.Lib, x.Rewaits, x.Grants)
					}
				}
			}
		}
		p("![hand-off gap and commands per grant, W=100 separate](results.svg)\n\n")
	}

	if len(rep.Uncontended) > 0 {
		p("## (a) Uncontended acquire + release\n\n")
		p("G goroutines share one Client, each on its own key, for %s s per run. Allocations are `runtime.MemStats.Mallocs` deltas over the run divided by pairs (whole process: includes the library's background goroutines and the release func each adapter returns; rueidislock's row includes its adapter's bounded wait, about 4 allocs).\n\n", fmtNum(m.Params.UncontendedSeconds))
		p("*Redis CPU* is the main thread's CPU time (`INFO cpu` `used_cpu_user_main_thread` + `used_cpu_sys_main_thread`, delta over the run) per pair; *client CPU* is the bench process's CPU time (`getrusage`, user + system, every thread) per pair, the lib's client cost with the loop's small part; *time in commands* is `INFO commandstats`' usec of the two commands that took the most, per pair (an EVALSHA's includes the commands its script ran). For G=1, *PING p50* is sequential PINGs through the lib's own client right before and right after the run, and *pair/PING* the pair's p50 in those round trips.\n\n")
		p("| G | lib | pairs/s | pair p50 µs | pair p99 µs | allocs/pair | bytes/pair | cmds/pair | Redis CPU µs/pair | client CPU µs/pair | time in commands, µs per pair | PING p50 µs | pair/PING |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, g := range rep.Uncontended {
			n := len(g.Runs)
			ping, ratio := "–", "–"
			if g.PingP50Us.Median > 0 {
				ping, ratio = fmtSum(g.PingP50Us, n), fmtSum(g.PairPings, n)
			}
			p("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", g.G, g.Lib, fmtSum(g.PairsPerS, n), fmtSum(g.PairP50Us, n), fmtSum(g.PairP99Us, n), fmtSum(g.AllocsPair, n), fmtSum(g.BytesPair, n), fmtSum(g.CmdsPair, n), fmtSum(g.CPUPairUs, n), fmtSum(g.ClientCPU, n), ifs(g.TopTimes != "", g.TopTimes, "–"), ping, ratio)
		}
		p("\n")
	}

	if c := rep.Ceiling; c != nil {
		n := len(c.Runs)
		p("## (c) Ceiling\n\n")
		p("Sequential PING round trip from Go (go-redis), %s s per run: p50 %s µs, p99 %s µs, %s PINGs/s.\n\n", fmtNum(m.Params.PingSeconds), fmtSum(c.GoPingP50Us, n), fmtSum(c.GoPingP99Us, n), fmtSum(c.GoPingPerS, n))
		if len(c.Bench) > 0 {
			p("`redis-benchmark -q -n %d -c C -t ping,set` against the same server (%d run(s)):\n\n", m.Params.BenchN, m.Params.BenchReps)
			p("| C | test | requests/s | p50 ms |\n|---|---|---|---|\n")
			for _, b := range c.Bench {
				p("| %d | %s | %s | %s |\n", b.Clients, b.Test, fmtSum(b.RPS, m.Params.BenchReps), fmtSum(b.P50Ms, m.Params.BenchReps))
			}
			p("\n")
		}
	}

	if s := rep.Scale; s != nil {
		p("## (d) Scale (%s)\n\n", s.Lib)
		p("| measure | value |\n|---|---|\n")
		p("| locks held by one Client | %d (acquired in %.1f s) |\n", s.HeldLocks, s.AcquireAllSeconds)
		p("| watchdog timeout / renewal period | %s s / %s s (renewal = a third of the timeout); measured over %s s |\n", fmtNum(s.WatchdogS), fmtNum(s.RenewalPeriodS), fmtNum(s.MeasuredS))
		p("| Redis commands per renewal period | %s (%s per lock); top: %s |\n", fmtNum(s.CmdsPerPeriod), fmtNum(s.CmdsPerLockPeriod), topCommands(s.HeldCommandStats, 0, 3))
		p("| Redis main-thread CPU per lock per renewal period | %s µs |\n", fmtNum(s.CPUPerLockPeriodUs))
		p("| lock keys alive after the period | %d |\n", s.KeysAliveAfter)
		p("| waiters / names | %d / %d |\n", s.Waiters, s.Names)
		p("| heap per waiter | %s bytes |\n", fmtNum(s.HeapPerWaiterBytes))
		p("| goroutine stack per waiter | %s bytes (%s goroutines per waiter, the harness's own included) |\n", fmtNum(s.StackPerWaiterBytes), fmtNum(s.GoroutinesPerWaiter))
		p("| wake latency p50 / p99 / max | %s / %s / %s ms |\n", fmtNum(s.WakeP50Ms), fmtNum(s.WakeP99Ms), fmtNum(s.WakeMaxMs))
		p("| drain: %d grants in | %.2f s, %s commands and %s µs of Redis main-thread CPU per grant |\n", s.Grants, s.DrainSeconds, fmtNum(s.DrainCmdsPerGrant), fmtNum(s.DrainCPUPerGrantUs))
		p("| violations / errors | %d / %d %s |\n\n", s.Violations, s.Errors, s.FirstError)
	}
	writeCost(w, rep)
	if len(rep.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range rep.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
}

func nextHotkeySection(all []HotkeyGroup, g HotkeyGroup) bool {
	i := slices.IndexFunc(all, func(x HotkeyGroup) bool { return x.Lib == g.Lib && x.W == g.W && x.Mode == g.Mode })
	return i == len(all)-1 || all[i+1].W != g.W || all[i+1].Mode != g.Mode
}

func ifs(c bool, s string, alt ...string) string {
	if c {
		return s
	}
	if len(alt) > 0 {
		return alt[0]
	}
	return ""
}

// writeTargets checks dlock's row against issue 9's targets, from the
// medians of this very run, and says by how much each is met or missed.
func writeTargets(w io.Writer, rep *Report) {
	const me = "dlock"
	peer := func(lib string) bool { return !strings.HasPrefix(lib, "dlock") }
	var lines []string
	add := func(target, detail string, met bool) {
		lines = append(lines, fmt.Sprintf("| %s | %s | %s |", target, detail, ifs(met, "met", "**missed**")))
	}
	for _, g := range []int{16, 1} {
		var mine *UncontendedGroup
		var best, bestCPU *UncontendedGroup
		for i := range rep.Uncontended {
			u := &rep.Uncontended[i]
			switch {
			case u.G != g:
			case u.Lib == me:
				mine = u
			case peer(u.Lib):
				if best == nil || u.PairsPerS.Median > best.PairsPerS.Median {
					best = u
				}
				if bestCPU == nil || u.CPUPairUs.Median < bestCPU.CPUPairUs.Median {
					bestCPU = u
				}
			}
		}
		if mine == nil || best == nil {
			continue
		}
		if g == 16 {
			r := mine.PairsPerS.Median / best.PairsPerS.Median
			add("G=16 pairs/s ≥ every peer's", fmt.Sprintf("%s vs %s's %s: %.2f×", fmtNum(mine.PairsPerS.Median), best.Lib, fmtNum(best.PairsPerS.Median), r), r >= 1)
		}
		r := mine.CPUPairUs.Median / bestCPU.CPUPairUs.Median
		add(fmt.Sprintf("G=%d Redis CPU per pair ≤ the lowest peer's", g), fmt.Sprintf("%s µs vs %s's %s µs: %.2f×", fmtNum(mine.CPUPairUs.Median), bestCPU.Lib, fmtNum(bestCPU.CPUPairUs.Median), r), r <= 1)
		if g == 1 && mine.PairPings.Median > 0 {
			add("G=1 pair p50 ≤ 2.2 PINGs on the same client", fmt.Sprintf("%s µs = %.2f PINGs of %s µs", fmtNum(mine.PairP50Us.Median), mine.PairPings.Median, fmtNum(mine.PingP50Us.Median)), mine.PairPings.Median <= 2.2)
		}
	}
	var mine, bestCmds, bestCPU, bestGap *HotkeyGroup
	maxW := 0
	for _, h := range rep.Hotkey {
		if h.Mode == "separate" {
			maxW = max(maxW, h.W)
		}
	}
	for i := range rep.Hotkey {
		h := &rep.Hotkey[i]
		switch {
		case h.Mode != "separate" || h.W != maxW:
		case h.Lib == me:
			mine = h
		case peer(h.Lib):
			if bestCmds == nil || h.CmdsPerGrant.Median < bestCmds.CmdsPerGrant.Median {
				bestCmds = h
			}
			if bestCPU == nil || h.CPUGrantUs.Median < bestCPU.CPUGrantUs.Median {
				bestCPU = h
			}
			if bestGap == nil || h.GapP50Ms.Median < bestGap.GapP50Ms.Median {
				bestGap = h
			}
		}
	}
	if mine != nil && bestCmds != nil {
		r := mine.CmdsPerGrant.Median / bestCmds.CmdsPerGrant.Median
		add(fmt.Sprintf("W=%d separate: commands per grant ≤ ¼ of the best peer's", maxW), fmt.Sprintf("%s vs %s's %s: %.2f×", fmtNum(mine.CmdsPerGrant.Median), bestCmds.Lib, fmtNum(bestCmds.CmdsPerGrant.Median), r), r <= 0.25)
		r = mine.CPUGrantUs.Median / bestCPU.CPUGrantUs.Median
		add(fmt.Sprintf("W=%d separate: Redis CPU per grant ≤ ¼ of the best peer's", maxW), fmt.Sprintf("%s µs vs %s's %s µs: %.2f×", fmtNum(mine.CPUGrantUs.Median), bestCPU.Lib, fmtNum(bestCPU.CPUGrantUs.Median), r), r <= 0.25)
		r = mine.GapP50Ms.Median / bestGap.GapP50Ms.Median
		add(fmt.Sprintf("W=%d separate: hand-off gap p50 ≤ the best peer's", maxW), fmt.Sprintf("%s ms vs %s's %s ms: %.2f×", fmtNum(mine.GapP50Ms.Median), bestGap.Lib, fmtNum(bestGap.GapP50Ms.Median), r), r <= 1)
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "## Targets (issue 9), from this run's medians\n\n")
	fmt.Fprintf(w, "Peers are every row not named dlock*; README.md (*Where dlock stands*) says why a figure depends on the host. Allocations per pair are the root package's `go test -run XXX -bench UncontendedNewHandle -benchmem` (the allocs/pair column below counts the whole bench process, adapter included).\n\n")
	fmt.Fprintf(w, "| target | dlock vs the best peer | |\n|---|---|---|\n%s\n\n", strings.Join(lines, "\n"))
}
