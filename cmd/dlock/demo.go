package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/demo"
	"github.com/dlock-dev/dlock/dlockprom"
)

// demoJSON is the --json output: exactly these keys.
type demoJSON struct {
	Stock            int     `json:"stock"`
	Issued           int     `json:"issued"`
	Oversold         int     `json:"oversold"`
	Requests         int     `json:"requests"`
	Rejected         int     `json:"rejected"`
	WaitP50ms        float64 `json:"wait_p50_ms"`
	WaitP99ms        float64 `json:"wait_p99_ms"`
	CommandsPerIssue float64 `json:"commands_per_issue"`
}

func msf(d time.Duration) float64 { return math.Round(float64(d.Microseconds())) / 1000 }

func round2(f float64) float64 { return math.Round(f*100) / 100 }

func (a *app) demoCommand() *cobra.Command {
	var (
		cfg         demo.Config
		asJSON      bool
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "demo [--redis URL] [--servers N] [--workers N] [--stock N] [--requests N] [--think D] [--no-lock | --fair] [--json] [--metrics-addr ADDR]",
		Short: "Run the first-come coupon race, with and without the lock",
		Long: `demo is a first-come coupon issuance, the race a lock exists for.
--servers simulated app servers, each with its own Redis connection pool
and its own dlock Client, race --workers workers each to serve --requests
requests for --stock coupons.
Issuing is a read-check-write: GET the stock, check it (a millisecond), SET
it one lower and RPUSH the coupon. With the lock (coupon:issue:<event>, taken
with WithLock) exactly --stock coupons are issued; with --no-lock the reads
race and the event oversells. With --fair the lock is a fair lock (FairMutex):
requests are served strictly in the order they reached Redis.

Without --redis (and without $DLOCK_REDIS_URL) the demo runs on an embedded
Redis (miniredis) inside this process, with its clock following real time:
nothing to install. With --redis it runs on that server under keys of its
own ("coupon:issue:demo-*", "coupon:{demo-*}:*") and deletes them afterwards.

It reports stock, issued, oversold, requests, rejected (sold out, or not
served within the 10s wait), the wait for the lock (p50, p99) and Redis
commands per issued coupon: the commands the servers' clients sent, a script
call counting as one. On a real Redis it also shows the server's count from
INFO commandstats, which counts the commands inside scripts as well (and
any other client's traffic meanwhile).

--json prints one object: {"stock", "issued", "oversold", "requests",
"rejected", "wait_p50_ms", "wait_p99_ms", "commands_per_issue"}.
--metrics-addr serves Prometheus metrics (dlockprom) on /metrics while it runs.
A progress bar is drawn on stderr when it is a terminal.

Exit codes: 0 done (oversold or not: the report says), 2 bad flags or a
--metrics-addr that cannot be listened on, 69 Redis unreachable, 77 Redis
refused the first PING (a wrong password, an ACL denial), 1 other failures.`,
		Example: `  dlock demo                    # with the lock: never oversells
  dlock demo --no-lock          # without: watch it oversell
  dlock demo --fair             # first come, first served, across servers
  dlock demo --servers 5 --workers 20 --stock 1000 --requests 5000
  dlock demo --json | jq .oversold
  dlock demo --redis redis://127.0.0.1:6379 --metrics-addr :9464`,
		Args: wrapArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDemoFlags(cfg); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			backend := "an embedded Redis (miniredis)"
			if a.redisFlagSet(cmd) {
				t, err := a.target()
				if err != nil {
					return err
				}
				opts, err := t.single("demo")
				if err != nil {
					return err
				}
				rdb, _, err := a.connect(ctx)
				if err != nil {
					return err
				}
				_ = rdb.Close()
				cfg.Redis = opts
				backend = "Redis at " + opts.Addr
			}
			cfg.ClientOptions = a.clientOptions()
			if !a.redisFlagSet(cmd) {
				// miniredis is no Redis server to check (it fails the
				// version check by construction): no safety warnings.
				cfg.ClientOptions = append(cfg.ClientOptions, dlock.WithSafetyCheck(false))
			}
			if metricsAddr != "" {
				stop, err := a.serveMetrics(metricsAddr, &cfg)
				if err != nil {
					return err
				}
				defer stop()
			}
			var bar *progress
			if isTerminal(a.stderr) {
				bar = newProgress(a.stderr, cfg.Requests)
				cfg.Progress = bar.set
			}
			res, err := demo.Run(ctx, cfg)
			if bar != nil {
				bar.stop() // before any output: both may be the terminal
			}
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			if asJSON {
				return json.NewEncoder(a.stdout).Encode(demoJSON{
					Stock: res.Stock, Issued: res.Issued, Oversold: res.Oversold,
					Requests: res.Requests, Rejected: res.Rejected,
					WaitP50ms: msf(res.WaitP50), WaitP99ms: msf(res.WaitP99),
					CommandsPerIssue: round2(res.CommandsPerIssue()),
				})
			}
			printDemo(a.stdout, backend, cfg, res)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&cfg.Servers, "servers", demo.DefaultServers, "simulated app servers, each with its own Client and connection pool")
	fl.IntVar(&cfg.Workers, "workers", demo.DefaultWorkers, "concurrent workers per server")
	fl.IntVar(&cfg.Stock, "stock", demo.DefaultStock, "coupons to issue")
	fl.IntVar(&cfg.Requests, "requests", demo.DefaultRequests, "issue requests in total")
	fl.BoolVar(&cfg.NoLock, "no-lock", false, "issue without the lock, to see the oversell")
	fl.BoolVar(&cfg.Fair, "fair", false, "use a fair lock: requests are served in arrival order across servers")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object")
	fl.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on ADDR/metrics while running, e.g. :9464")
	fl.DurationVar(&cfg.Think, "think", demo.DefaultThink, "pause between reading and writing the stock")
	return cmd
}

// checkDemoFlags names the first bad flag.
func checkDemoFlags(cfg demo.Config) error {
	switch {
	case cfg.Servers < 1 || cfg.Servers > 1000:
		return usagef("--servers must be 1 to 1000, got %d", cfg.Servers)
	case cfg.Workers < 1 || cfg.Workers > 10000:
		return usagef("--workers must be 1 to 10000, got %d", cfg.Workers)
	case cfg.Stock < 1:
		return usagef("--stock must be at least 1, got %d", cfg.Stock)
	case cfg.Requests < 1:
		return usagef("--requests must be at least 1, got %d", cfg.Requests)
	case cfg.Think < 0:
		return usagef("--think must not be negative, got %v", cfg.Think)
	case cfg.Fair && cfg.NoLock:
		return usagef("--fair and --no-lock exclude each other")
	}
	return nil
}

func printDemo(w io.Writer, backend string, cfg demo.Config, r demo.Result) {
	mode := "with the lock"
	switch {
	case cfg.NoLock:
		mode = "WITHOUT the lock (--no-lock)"
	case cfg.Fair:
		mode = "with the fair lock (--fair)"
	}
	fmt.Fprintf(w, "dlock demo: first-come coupon issuance on %s\n", backend)
	fmt.Fprintf(w, "%d servers x %d workers, %d requests for %d coupons, %s\n\n", cfg.Servers, cfg.Workers, r.Requests, r.Stock, mode)
	row := func(k, v string) { fmt.Fprintf(w, "  %-20s %s\n", k, v) }
	row("stock", fmt.Sprint(r.Stock))
	row("issued", fmt.Sprint(r.Issued))
	row("oversold", fmt.Sprint(r.Oversold))
	row("requests", fmt.Sprint(r.Requests))
	row("rejected", fmt.Sprintf("%d (sold out %d, lock wait timed out %d)", r.Rejected, r.Rejected-r.TimedOut, r.TimedOut))
	if cfg.NoLock {
		row("wait p50 / p99", "- (no lock)")
	} else {
		row("wait p50 / p99", fmt.Sprintf("%v / %v", r.WaitP50.Round(10*time.Microsecond), r.WaitP99.Round(10*time.Microsecond)))
	}
	cmds := fmt.Sprintf("%.2f sent by the clients", r.CommandsPerIssue())
	if s := r.ServerCommandsPerIssue(); s >= 0 {
		cmds += fmt.Sprintf("; %.2f run by the server, script internals included", s)
	}
	row("commands per issue", cmds)
	row("elapsed", r.Elapsed.Round(time.Millisecond).String())
	fmt.Fprintln(w)
	switch {
	case r.Oversold > 0:
		fmt.Fprintf(w, "OVERSOLD: %d coupons issued beyond the stock of %d: the read-check-write raced.\nRun it without --no-lock to see the lock prevent it.\n", r.Oversold, r.Stock)
	case cfg.NoLock:
		fmt.Fprintln(w, "No oversell this time: the race needs more than one worker. Try more --workers.")
	default:
		fmt.Fprintf(w, "Never oversold: every coupon was issued under the lock. Run with --no-lock to see the race it prevents.\n")
	}
}

// serveMetrics serves /metrics from a private registry that the demo's
// Clients report to, until the returned stop is called.
func (a *app) serveMetrics(addr string, cfg *demo.Config) (func(), error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := dlockprom.New(reg)
	if err != nil {
		return nil, err
	}
	cfg.ClientOptions = append(cfg.ClientOptions, dlock.WithObserver(m))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, exitf(exitUsage, "--metrics-addr %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(a.stderr, "dlock: metrics server: %v\n", err)
		}
	}()
	fmt.Fprintf(a.stderr, "dlock: serving metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// progress draws a bar on a terminal, at most every 100ms.
type progress struct {
	w     io.Writer
	total int
	done  atomic.Int64
	quit  chan struct{}
	wg    sync.WaitGroup
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total, quit: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw()
			case <-p.quit:
				p.draw()
				fmt.Fprint(p.w, "\n")
				return
			}
		}
	}()
	return p
}

// set records done requests; the workers report concurrently and out of
// order, so the bar keeps the highest count (the last draw shows them all).
func (p *progress) set(done int) {
	for d := p.done.Load(); int64(done) > d && !p.done.CompareAndSwap(d, int64(done)); d = p.done.Load() {
	}
}

func (p *progress) draw() {
	const width = 40
	d := int(p.done.Load())
	filled := width
	if p.total > 0 {
		filled = min(d*width/p.total, width)
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d requests", strings.Repeat("#", filled), strings.Repeat(".", width-filled), d, p.total)
}

func (p *progress) stop() {
	close(p.quit)
	p.wg.Wait()
}
