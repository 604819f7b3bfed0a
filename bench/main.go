// Command bench runs dlock's side-by-side benchmark suite against redsync,
// redislock, rueidislock and the seeds' spin loop, on a private
// redis-server it starts on a free loopback port. See README.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// SuiteConfig selects and sizes the scenarios.
type SuiteConfig struct {
	Reps int

	Uncontended  bool
	UncontendedG []int
	UncontendedD time.Duration

	Hotkey       bool
	HotkeyW      []int
	HotkeyGrants int // target total grants per run; K = Grants / W
	HotkeyModes  []bool
	Hold         time.Duration

	Ceiling   bool
	CeilCfg   CeilingConfig
	BenchReps int // redis-benchmark runs (the Go PING part runs every rep)

	Scale bool

	Cost    bool
	CostCfg CostConfig

	Cluster    bool
	ClusterCfg ClusterConfig
}

// single says whether a scenario that runs on the single private
// redis-server is selected (the cluster scenario starts its own servers).
func (c SuiteConfig) single() bool {
	return c.Uncontended || c.Hotkey || c.Ceiling || c.Scale || c.Cost
}

// scaleRunner is scenario (d); set by scenario_scale.go, which needs dlock
// and is left out by -tags nodlock.
var scaleRunner func(ctx context.Context, srv *redisServer, progress io.Writer) (*ScaleResult, error)

// dlockBuilt is set by lib_dlock.go (false with -tags nodlock).
var dlockBuilt bool

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		full        = fs.Bool("full", false, "run everything, bigger: 3 s uncontended runs, ~1000 grants per hot-key run, redis-benchmark every rep, and scale (d) (dlock only)")
		reps        = fs.Int("reps", 3, "repetitions R of each scenario (median and min–max are reported)")
		libsFlag    = fs.String("libs", "", "comma-separated libs to run (default all): "+libNames())
		scenarios   = fs.String("scenarios", "", "comma-separated scenarios: uncontended,hotkey,ceiling,scale,cost,cluster (default: the first three; -full adds scale; cost and cluster only when named)")
		dur         = fs.Duration("duration", 0, "duration of one uncontended run (default 500ms, -full 3s)")
		gs          = fs.String("g", "1,16", "uncontended goroutine counts")
		ws          = fs.String("w", "10,100", "hot-key goroutine counts W")
		grants      = fs.Int("grants", 0, "target grants per hot-key run, K = grants/W (default 300, -full 1000)")
		hold        = fs.Duration("hold", 5*time.Millisecond, "hot-key critical section L (sleep)")
		modes       = fs.String("modes", "separate,shared", "hot-key client modes")
		pingDur     = fs.Duration("ping", time.Second, "duration of the sequential Go PING measurement")
		benchN      = fs.Int("bench-n", 100000, "redis-benchmark -n")
		outDir      = fs.String("out", "out", "directory for RESULTS.md, results.json, results.svg (out/ is ignored by git; -out . regenerates the committed files, as make bench-results does)")
		serverBin   = fs.String("redis-server", "", "redis-server binary (default: from PATH, else /usr/bin/redis-server)")
		benchBin    = fs.String("redis-benchmark", "", "redis-benchmark binary (default: from PATH, else /usr/bin/redis-benchmark)")
		rsDelay     = fs.Duration("redsync-delay", redsyncRetryDelay, "redsync WithRetryDelay")
		rlBackoff   = fs.Duration("redislock-backoff", redislockBackoff, "redislock LinearBackoff interval")
		writeOutput = fs.Bool("write", true, "write RESULTS.md, results.json and results.svg")
		clMasters   = fs.String("cluster-masters", "1,3,6", "cluster scenario: cluster sizes (masters; each gets one replica)")
		clDur       = fs.Duration("cluster-duration", time.Second, "cluster scenario: duration of one uncontended run")
		clW         = fs.Int("cluster-w", 10, "cluster scenario: hot-key waiters W (one Client each)")
		clGrants    = fs.Int("cluster-grants", 200, "cluster scenario: target grants per hot-key run")
		costW       = fs.String("cost-w", "1,2,5,10,20,50,100", "cost scenario: waiters W per key for the per-grant fit")
		costGrants  = fs.Int("cost-grants", defaultCost.Grants, "cost scenario: target grants per per-grant run, K = grants/W")
		costHeld    = fs.Int("cost-held", defaultCost.Held, "cost scenario: locks held idle by one Client")
		costP       = fs.String("cost-p", "10,50", "cost scenario: waiting processes P for the per-waiter fit")
		costWindow  = fs.Duration("cost-window", defaultCost.WaitFor, "cost scenario: measured window of the held and waiting parts (dlock re-checks every 3 s: keep a multiple)")
		render      = fs.String("render", "", "measure nothing: re-render RESULTS.md and results.svg (and results.json) into -out from this results.json")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	redsyncRetryDelay, redislockBackoff = *rsDelay, *rlBackoff
	if *render != "" {
		rep, err := readJSON(*render)
		if err == nil {
			err = writeOutputs(*outDir, rep)
		}
		if err != nil {
			fmt.Fprintln(stderr, "render:", err)
			return 1
		}
		return 0
	}

	libs, unknown := selectLibs(*libsFlag)
	if len(unknown) > 0 {
		fmt.Fprintf(stderr, "unknown libs %v; known: %s\n", unknown, libNames())
		return 2
	}
	cfg := SuiteConfig{Reps: *reps, UncontendedD: *dur, HotkeyGrants: *grants, Hold: *hold, BenchReps: 1}
	var err error
	if cfg.UncontendedG, err = parseInts(*gs); err != nil {
		fmt.Fprintln(stderr, "-g:", err)
		return 2
	}
	if cfg.HotkeyW, err = parseInts(*ws); err != nil {
		fmt.Fprintln(stderr, "-w:", err)
		return 2
	}
	for _, m := range strings.Split(*modes, ",") {
		switch strings.TrimSpace(m) {
		case "separate":
			cfg.HotkeyModes = append(cfg.HotkeyModes, false)
		case "shared":
			cfg.HotkeyModes = append(cfg.HotkeyModes, true)
		default:
			fmt.Fprintf(stderr, "-modes: unknown mode %q\n", m)
			return 2
		}
	}
	if cfg.UncontendedD == 0 {
		cfg.UncontendedD = ifd(*full, 3*time.Second, 500*time.Millisecond)
	}
	if cfg.HotkeyGrants == 0 {
		cfg.HotkeyGrants = ifi(*full, 1000, 300)
	}
	if *full {
		cfg.BenchReps = cfg.Reps
	}
	sc := *scenarios
	if sc == "" {
		sc = "uncontended,hotkey,ceiling"
		if *full {
			sc += ",scale"
		}
	}
	for _, s := range strings.Split(sc, ",") {
		switch strings.TrimSpace(s) {
		case "uncontended", "a":
			cfg.Uncontended = true
		case "hotkey", "b":
			cfg.Hotkey = true
		case "ceiling", "c":
			cfg.Ceiling = true
		case "scale", "d":
			cfg.Scale = true
		case "cost", "f":
			cfg.Cost = true
		case "cluster":
			cfg.Cluster = true
		default:
			fmt.Fprintf(stderr, "-scenarios: unknown scenario %q\n", s)
			return 2
		}
	}
	if cfg.Reps < 1 {
		fmt.Fprintln(stderr, "-reps must be >= 1")
		return 2
	}
	cfg.CostCfg = defaultCost
	cfg.CostCfg.Grants, cfg.CostCfg.Held, cfg.CostCfg.Hold = *costGrants, *costHeld, cfg.Hold
	cfg.CostCfg.HeldFor, cfg.CostCfg.WaitFor = *costWindow, *costWindow
	if cfg.CostCfg.W, err = parseInts(*costW); err != nil {
		fmt.Fprintln(stderr, "-cost-w:", err)
		return 2
	}
	if cfg.CostCfg.P, err = parseInts(*costP); err != nil {
		fmt.Fprintln(stderr, "-cost-p:", err)
		return 2
	}
	srvPath := findBin(*serverBin, "redis-server")
	cfg.ClusterCfg = ClusterConfig{Reps: cfg.Reps, G: 16, Duration: *clDur, W: *clW, Grants: *clGrants, Hold: cfg.Hold, ServerBin: srvPath}
	if cfg.ClusterCfg.Masters, err = parseInts(*clMasters); err != nil {
		fmt.Fprintln(stderr, "-cluster-masters:", err)
		return 2
	}
	cfg.CeilCfg = CeilingConfig{PingDuration: *pingDur, BenchBin: findBin(*benchBin, "redis-benchmark"), BenchN: *benchN, BenchClients: []int{1, 16}}

	// Kill our redis-server on SIGINT/SIGTERM (Pdeathsig covers SIGKILL).
	var current atomic.Pointer[redisServer]
	var interrupted atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer func() {
		signal.Stop(sigc) // no send after it returns: closing ends the handler
		close(sigc)
	}()
	go func() {
		sig, ok := <-sigc
		if !ok {
			return
		}
		interrupted.Store(true) // before cancel: no partial results are written
		fmt.Fprintf(stderr, "\n%v: stopping the bench's redis-server and exiting (no results written)\n", sig)
		cancel()
		if s := current.Load(); s != nil {
			s.Stop()
		}
		stopRunningCluster()
		os.Exit(130)
	}()

	code := 0
	if cfg.single() {
		code = runSingle(ctx, singleRun{srvPath: srvPath, libs: libs, cfg: cfg, args: args, full: *full, outDir: *outDir, write: *writeOutput}, stderr, &current, &interrupted)
	}
	if cfg.Cluster && ctx.Err() == nil {
		code = max(code, runClusterScenario(ctx, cfg.ClusterCfg, args, *outDir, *writeOutput, stderr, &interrupted))
	}
	return code
}

// singleRun is what runSingle needs from run's flags.
type singleRun struct {
	srvPath string
	libs    []Lib
	cfg     SuiteConfig
	args    []string
	full    bool
	outDir  string
	write   bool
}

// runSingle runs the scenarios on the single private redis-server and
// writes RESULTS.md, results.json and results.svg; it returns the exit code.
func runSingle(ctx context.Context, sr singleRun, stderr io.Writer, current *atomic.Pointer[redisServer], interrupted *atomic.Bool) int {
	srvPath, libs, cfg, args := sr.srvPath, sr.libs, sr.cfg, sr.args
	srv, err := startRedis(srvPath)
	if err != nil {
		fmt.Fprintln(stderr, "start redis-server:", err)
		return 1
	}
	current.Store(srv)
	defer srv.Stop()
	fmt.Fprintf(stderr, "bench: redis-server %s on %s; libs: %s; R=%d\n", srv.Version, srv.Addr, strings.Join(names(libs), ", "), cfg.Reps)

	rep := runSuite(ctx, srv, libs, cfg, stderr)
	if interrupted.Load() {
		select {} // the signal handler is exiting the process
	}
	rep.Meta.Command = strings.TrimSpace("go run . " + strings.Join(args, " "))
	if !dlockBuilt {
		rep.Meta.Command = strings.Replace(rep.Meta.Command, "go run .", "go run -tags nodlock .", 1)
	}
	rep.Meta.Full = sr.full

	if sr.write {
		if err := writeOutputs(sr.outDir, rep); err != nil {
			fmt.Fprintln(stderr, "write results:", err)
			return 1
		}
		fmt.Fprintf(stderr, "bench: wrote %s\n", strings.Join([]string{filepath.Join(sr.outDir, "RESULTS.md"), filepath.Join(sr.outDir, "results.json"), filepath.Join(sr.outDir, "results.svg")}, ", "))
	}
	if len(rep.Problems) > 0 {
		fmt.Fprintf(stderr, "bench: FAILED: %d problem(s):\n", len(rep.Problems))
		for _, p := range rep.Problems {
			fmt.Fprintln(stderr, "  -", p)
		}
		return 1
	}
	return 0
}

// runSuite runs the selected scenarios for libs and returns the report
// (Problems lists invalid runs; it never stops at the first one, but every
// problem is also printed at once on progress).
func runSuite(ctx context.Context, srv *redisServer, libs []Lib, cfg SuiteConfig, progress io.Writer) *Report {
	rep := &Report{}
	m := &rep.Meta
	m.Started = time.Now()
	m.GoVersion = runtime.Version()
	m.GOOS, m.GOARCH = runtime.GOOS, runtime.GOARCH
	m.NumCPU, m.GOMAXPROCS = runtime.NumCPU(), runtime.GOMAXPROCS(0)
	m.CPUModel = cpuModel()
	m.LoadStart = loadAvg()
	m.RedisVersion = srv.Version
	m.RedisArgs = `--save "" --appendonly no --bind 127.0.0.1`
	m.Reps = cfg.Reps
	m.DlockBuilt = dlockBuilt
	m.Params = Params{
		UncontendedGoroutines: cfg.UncontendedG, UncontendedSeconds: cfg.UncontendedD.Seconds(),
		HotkeyW: cfg.HotkeyW, HotkeyGrants: cfg.HotkeyGrants, HoldMs: ms(cfg.Hold),
		PingSeconds: cfg.CeilCfg.PingDuration.Seconds(), BenchN: cfg.CeilCfg.BenchN, BenchClients: cfg.CeilCfg.BenchClients, BenchReps: cfg.BenchReps,
	}
	var order []string
	for _, l := range libs {
		order = append(order, l.Name())
		lm := LibMeta{Name: l.Name()}
		if d, ok := l.(Describer); ok {
			lm.Module, lm.Settings = d.Module(), d.Settings()
			lm.Version = moduleVersion(lm.Module)
		}
		m.Libs = append(m.Libs, lm)
	}
	problem := func(format string, a ...any) {
		s := fmt.Sprintf(format, a...)
		rep.Problems = append(rep.Problems, s)
		fmt.Fprintln(progress, "ERROR:", s)
	}
	R := cfg.Reps

	if cfg.Ceiling {
		var runs []CeilingRun
		for r := 1; r <= R && ctx.Err() == nil; r++ {
			cc := cfg.CeilCfg
			if r > cfg.BenchReps {
				cc.BenchBin = ""
			}
			fmt.Fprintf(progress, "[c ceiling] rep %d/%d%s\n", r, R, ifs(cc.BenchBin != "", " (with redis-benchmark)"))
			cr, err := runCeiling(ctx, srv, cc, r)
			if err != nil {
				problem("(c) ceiling rep %d: %v", r, err)
				continue
			}
			fmt.Fprintf(progress, "    Go PING p50 %.0f µs, %.0f/s\n", cr.GoPingP50Us, cr.GoPingPerS)
			runs = append(runs, cr)
		}
		if cfg.CeilCfg.BenchBin == "" {
			rep.Notes = append(rep.Notes, "redis-benchmark not found: its part of (c) was skipped")
		}
		rep.Ceiling = groupCeiling(runs)
	}

	if cfg.Uncontended {
		var runs []UncontendedRun
		for _, g := range cfg.UncontendedG {
			for r := 1; r <= R && ctx.Err() == nil; r++ {
				for _, lib := range rotate(libs, r-1) {
					if ctx.Err() != nil {
						break
					}
					fmt.Fprintf(progress, "[a uncontended G=%d] %-12s rep %d/%d ... ", g, lib.Name(), r, R)
					ur, err := runUncontended(ctx, srv, lib, UncontendedConfig{G: g, Duration: cfg.UncontendedD, PingFor: cfg.UncontendedD / 2}, r)
					if err != nil {
						fmt.Fprintln(progress)
						problem("(a) G=%d %s rep %d: %v", g, lib.Name(), r, err)
						continue
					}
					fmt.Fprintf(progress, "%.0f pairs/s, p50 %.0f µs, %.1f allocs/pair, Redis CPU %.1f µs/pair, client CPU %.1f µs/pair", ur.PairsPerS, ur.PairP50Us, ur.AllocsPair, ur.CPUPairUs, ur.ClientCPUPairUs)
					if ur.PingP50Us > 0 {
						fmt.Fprintf(progress, ", PING p50 %.0f µs (pair = %.2f PINGs)", ur.PingP50Us, ur.PairPings)
					}
					fmt.Fprintln(progress)
					for _, p := range ur.Problems() {
						problem("(a) G=%d %s rep %d: %s", g, lib.Name(), r, p)
					}
					runs = append(runs, ur)
				}
			}
		}
		rep.Uncontended = groupUncontended(runs, order)
	}

	if cfg.Hotkey {
		var runs []HotkeyRun
		for _, w := range cfg.HotkeyW {
			k := max(1, cfg.HotkeyGrants/w)
			for _, shared := range cfg.HotkeyModes {
				hc := HotkeyConfig{W: w, K: k, Hold: cfg.Hold, Shared: shared}
				timedOut := map[string]bool{} // libs whose run hit the deadline: not repeated
				for r := 1; r <= R && ctx.Err() == nil; r++ {
					for _, lib := range rotate(libs, r-1) {
						if ctx.Err() != nil {
							break
						}
						if timedOut[lib.Name()] {
							fmt.Fprintf(progress, "[b hotkey W=%d K=%d %s] %-12s rep %d/%d skipped: an earlier rep timed out\n", w, k, hc.Mode(), lib.Name(), r, R)
							continue
						}
						fmt.Fprintf(progress, "[b hotkey W=%d K=%d %s] %-12s rep %d/%d ... ", w, k, hc.Mode(), lib.Name(), r, R)
						hr, err := runHotkey(ctx, srv, lib, hc, r)
						if err != nil {
							fmt.Fprintln(progress)
							problem("(b) W=%d %s %s rep %d: %v", w, hc.Mode(), lib.Name(), r, err)
							continue
						}
						fmt.Fprintf(progress, "wall %.0f ms (ideal %.0f), %.1f cmds/grant, Redis CPU %.0f µs/grant, gap p50 %.2f p99 %.2f ms, violations %d\n",
							hr.WallMs, hr.IdealMs, hr.CmdsPerGrant, hr.CPUGrantUs, hr.GapP50Ms, hr.GapP99Ms, hr.Violations+int64(hr.Overlaps))
						for _, p := range hr.Problems() {
							problem("(b) W=%d %s %s rep %d: %s", w, hc.Mode(), lib.Name(), r, p)
						}
						runs = append(runs, hr)
						if hr.TimedOut {
							timedOut[lib.Name()] = true
							rep.Notes = append(rep.Notes, fmt.Sprintf("(b) W=%d %s: %s timed out in rep %d (%d of %d grants); its later reps of this configuration were skipped", w, hc.Mode(), lib.Name(), r, hr.Grants, hr.Expected))
						}
					}
				}
			}
		}
		rep.Hotkey = groupHotkey(runs, order)
	}

	if cfg.Scale && ctx.Err() == nil {
		if scaleRunner == nil {
			rep.Notes = append(rep.Notes, "scale (d) skipped: it needs dlock, and this binary was built with -tags nodlock")
			fmt.Fprintln(progress, "[d scale] skipped: built with -tags nodlock")
		} else {
			sr, err := scaleRunner(ctx, srv, progress)
			if err != nil {
				problem("(d) scale: %v", err)
			}
			if sr != nil {
				if sr.Violations > 0 {
					problem("(d) scale: MUTUAL EXCLUSION VIOLATED: %d violations", sr.Violations)
				}
				if sr.Errors > 0 {
					problem("(d) scale: %d errors (first: %s)", sr.Errors, sr.FirstError)
				}
			}
			rep.Scale = sr
		}
	}
	if cfg.Cost && ctx.Err() == nil {
		rep.Cost = runCost(ctx, srv, libs, cfg.CostCfg, R, progress, problem)
	}
	if ctx.Err() != nil {
		problem("interrupted: %v", ctx.Err())
	}
	m.Finished = time.Now()
	m.LoadEnd = loadAvg()
	return rep
}

func writeOutputs(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md bytes.Buffer
	writeMarkdown(&md, rep)
	resultsMD := filepath.Join(dir, "RESULTS.md")
	if old, err := os.ReadFile(resultsMD); err == nil {
		md.Write(keptTail(old))
	}
	if err := os.WriteFile(resultsMD, md.Bytes(), 0o644); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "results.json"), rep); err != nil {
		return err
	}
	var svg bytes.Buffer
	if err := writeSVG(&svg, rep); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.svg"), svg.Bytes(), 0o644)
}

// keptMarker starts the part of RESULTS.md that a run does not measure and so
// must not erase: before/after records of compare.sh, written by hand.
const keptMarker = "<!-- kept across runs: below this line -->"

// keptTail returns old's text from keptMarker on, preceded by a blank line,
// or nothing when old has no marker.
func keptTail(old []byte) []byte {
	i := bytes.Index(old, []byte(keptMarker))
	if i < 0 {
		return nil
	}
	return append([]byte("\n"), old[i:]...)
}

func libNames() string { return strings.Join(names(registry), ",") }

func names(libs []Lib) []string {
	var out []string
	for _, l := range libs {
		out = append(out, l.Name())
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func findBin(flagVal, name string) string {
	if flagVal != "" {
		return flagVal
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := "/usr/bin/" + name; fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	if v := infoField(strings.ReplaceAll(string(b), "\t", ""), "model name"); v != "" {
		return strings.TrimSpace(strings.TrimPrefix(v, " "))
	}
	return ""
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func ifd(c bool, a, b time.Duration) time.Duration {
	if c {
		return a
	}
	return b
}

func ifi(c bool, a, b int) int {
	if c {
		return a
	}
	return b
}
