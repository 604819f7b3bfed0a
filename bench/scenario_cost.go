package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Scenario (f), cost: what Redis's main thread pays for locks, as three
// rates an operator can add up for a deployment:
//
//   - per grant, as a function of the waiters W on one key (W Clients, the
//     hot-key run of (b) at several W): fitted as a + b·W µs;
//   - per held lock per renewal period, for the libraries whose locks renew
//     themselves while held (renewingLib): N locks held idle by one Client;
//   - per waiting process per second: P Clients blocked on a lock another
//     Client holds for the whole window (nothing is granted), fitted over P
//     as h + w·P µs per second (h: the holder, w: each waiter).
//
// The grant part repeats R times (medians, like (a) and (b)); the other two
// are rates over a window of several seconds and run once per lib.

// CostConfig sizes scenario (f).
type CostConfig struct {
	W      []int         // waiters per key, one Client each
	Grants int           // target grants per run; K = max(1, Grants/W)
	Hold   time.Duration // L

	Held    int           // locks held by one Client
	HeldTTL time.Duration // their watchdog timeout (dlock) / validity (rueidislock)
	HeldFor time.Duration // measured window

	P       []int         // waiting processes (Clients)
	WaitFor time.Duration // measured window (a multiple of dlock's 3 s re-check)
	// WaitStart is how long the waiters get to start waiting before the
	// window (first attempt, subscriptions).
	WaitStart time.Duration
}

var defaultCost = CostConfig{
	W: []int{1, 2, 5, 10, 20, 50, 100}, Grants: 200, Hold: 5 * time.Millisecond,
	Held: 10000, HeldTTL: 3 * time.Second, HeldFor: 6 * time.Second,
	P: []int{10, 50}, WaitFor: 6 * time.Second, WaitStart: 500 * time.Millisecond,
}

// renewingLib is implemented by a Lib whose locks renew themselves while
// held (a watchdog). NewRenewingClient builds a Client whose locks live ttl
// without renewal, and returns how often they are renewed.
type renewingLib interface {
	NewRenewingClient(addr string, ttl time.Duration) (c Client, renewal time.Duration, err error)
}

// CostResult is scenario (f)'s outcome.
type CostResult struct {
	Hold    float64        `json:"hold_ms"`
	Grants  int            `json:"target_grants"`
	Grant   []HotkeyGroup  `json:"per_grant"` // separate-mode hot-key runs at each W
	Held    []CostHeldRun  `json:"held"`
	Waiting []CostWaitRun  `json:"waiting"`
	Config  CostConfigJSON `json:"config"`
}

// CostConfigJSON is CostConfig as recorded in results.json.
type CostConfigJSON struct {
	W        []int   `json:"w"`
	Held     int     `json:"held_locks"`
	HeldTTLS float64 `json:"held_ttl_s"`
	HeldForS float64 `json:"held_window_s"`
	P        []int   `json:"p"`
	WaitForS float64 `json:"wait_window_s"`
}

// CostHeldRun is N locks held idle by one Client of one lib.
type CostHeldRun struct {
	Lib      string  `json:"lib"`
	Locks    int     `json:"locks"`
	TTLS     float64 `json:"ttl_s"`
	RenewalS float64 `json:"renewal_period_s"`
	WindowS  float64 `json:"window_s"`

	Commands     int64            `json:"commands"`
	CommandStats map[string]int64 `json:"command_stats"`
	CPUUs        float64          `json:"redis_cpu_us"`
	// Per lock per renewal period (the lib's own period), and per lock per
	// second (comparable across libs with different periods).
	CmdsPerLockPeriod  float64 `json:"cmds_per_lock_per_period"`
	CPUPerLockPeriodUs float64 `json:"redis_cpu_per_lock_per_period_us"`
	CPUPerLockSecUs    float64 `json:"redis_cpu_per_lock_per_s_us"`
	// CallsPerPeriod is the calls the Client sent per period (EVALSHA and
	// plain commands; commands inside scripts not counted): how renewals
	// are batched.
	CallsPerPeriod float64 `json:"calls_per_period"`
	// Keys in Redis before and after the window: a lock whose renewal
	// failed would have expired (key names are each library's own).
	KeysBefore int64  `json:"keys_before"`
	KeysAfter  int64  `json:"keys_after"`
	Error      string `json:"error,omitempty"`
}

// CostWaitRun is P Clients waiting on one key held by another Client.
type CostWaitRun struct {
	Lib     string  `json:"lib"`
	P       int     `json:"p"`
	WindowS float64 `json:"window_s"`

	Commands     int64            `json:"commands"`
	CommandStats map[string]int64 `json:"command_stats"`
	CPUUs        float64          `json:"redis_cpu_us"`
	// Per waiting process per second, the holder's share included (the fit
	// over P separates it).
	CPUPerProcSecUs float64 `json:"redis_cpu_per_process_per_s_us"`
	CmdsPerProcSec  float64 `json:"cmds_per_process_per_s"`
	// Granted counts waiters granted during the window: the hold ended
	// early (a TTL ran out). The run is then invalid.
	Granted int    `json:"granted"`
	Error   string `json:"error,omitempty"`
}

// costLimit bounds one part of one lib; a lib that cannot hold N locks or
// keep P waiters in less is reported, not waited for.
const costLimit = 2 * time.Minute

// runCost runs scenario (f) for libs; problem reports invalid runs.
func runCost(ctx context.Context, srv *redisServer, libs []Lib, cfg CostConfig, reps int, progress io.Writer, problem func(string, ...any)) *CostResult {
	res := &CostResult{Hold: ms(cfg.Hold), Grants: cfg.Grants, Config: CostConfigJSON{
		W: cfg.W, Held: cfg.Held, HeldTTLS: cfg.HeldTTL.Seconds(), HeldForS: cfg.HeldFor.Seconds(), P: cfg.P, WaitForS: cfg.WaitFor.Seconds(),
	}}
	var order []string
	for _, l := range libs {
		order = append(order, l.Name())
	}

	var runs []HotkeyRun
	for _, w := range cfg.W {
		hc := HotkeyConfig{W: w, K: max(1, cfg.Grants/w), Hold: cfg.Hold}
		for r := 1; r <= reps && ctx.Err() == nil; r++ {
			for _, lib := range rotate(libs, r-1) {
				if ctx.Err() != nil {
					break
				}
				fmt.Fprintf(progress, "[f cost per grant W=%d K=%d] %-12s rep %d/%d ... ", w, hc.K, lib.Name(), r, reps)
				hr, err := runHotkey(ctx, srv, lib, hc, r)
				if err != nil {
					fmt.Fprintln(progress)
					problem("(f) per grant W=%d %s rep %d: %v", w, lib.Name(), r, err)
					continue
				}
				fmt.Fprintf(progress, "%.1f cmds/grant, Redis CPU %.0f µs/grant\n", hr.CmdsPerGrant, hr.CPUGrantUs)
				for _, p := range hr.Problems() {
					problem("(f) per grant W=%d %s rep %d: %s", w, lib.Name(), r, p)
				}
				runs = append(runs, hr)
			}
		}
	}
	res.Grant = groupHotkey(runs, order)

	for _, lib := range libs {
		rl, ok := lib.(renewingLib)
		if !ok || ctx.Err() != nil {
			continue
		}
		fmt.Fprintf(progress, "[f cost held] %-12s %d locks, ttl %v, for %v ... ", lib.Name(), cfg.Held, cfg.HeldTTL, cfg.HeldFor)
		hr, err := costHeld(ctx, srv, lib.Name(), rl, cfg)
		if err != nil {
			hr.Error = err.Error()
			fmt.Fprintln(progress)
			problem("(f) held %s: %v", lib.Name(), err)
		} else {
			fmt.Fprintf(progress, "%.2f cmds and %.2f µs Redis CPU per lock per renewal period (%v)\n", hr.CmdsPerLockPeriod, hr.CPUPerLockPeriodUs, time.Duration(hr.RenewalS*float64(time.Second)))
			if hr.KeysAfter < hr.KeysBefore || hr.KeysBefore < int64(cfg.Held) {
				problem("(f) held %s: %d keys before the window (%d locks), %d after: locks expired", lib.Name(), hr.KeysBefore, cfg.Held, hr.KeysAfter)
			}
		}
		res.Held = append(res.Held, hr)
	}

	for _, p := range cfg.P {
		for _, lib := range libs {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(progress, "[f cost waiting P=%d] %-12s for %v ... ", p, lib.Name(), cfg.WaitFor)
			wr, err := costWaiting(ctx, srv, lib, p, cfg.WaitStart, cfg.WaitFor)
			if err != nil {
				wr.Error = err.Error()
				fmt.Fprintln(progress)
				problem("(f) waiting P=%d %s: %v", p, lib.Name(), err)
			} else {
				fmt.Fprintf(progress, "%.1f µs Redis CPU and %.2f cmds per waiting process per second\n", wr.CPUPerProcSecUs, wr.CmdsPerProcSec)
				if wr.Granted > 0 {
					problem("(f) waiting P=%d %s: %d waiters granted while the lock was held (its TTL ran out?)", p, lib.Name(), wr.Granted)
				}
			}
			res.Waiting = append(res.Waiting, wr)
		}
	}
	return res
}

// costHeld: cfg.Held locks held idle by one Client whose locks live
// cfg.HeldTTL unless renewed; what Redis does over cfg.HeldFor.
func costHeld(ctx context.Context, srv *redisServer, name string, rl renewingLib, cfg CostConfig) (CostHeldRun, error) {
	r := CostHeldRun{Lib: name, Locks: cfg.Held, TTLS: cfg.HeldTTL.Seconds()}
	ctx, cancel := context.WithTimeout(ctx, costLimit)
	defer cancel()
	if err := srv.Flush(ctx); err != nil {
		return r, err
	}
	c, renewal, err := rl.NewRenewingClient(srv.Addr, cfg.HeldTTL)
	if err != nil {
		return r, err
	}
	defer c.Close()
	r.RenewalS = renewal.Seconds()
	seq := runSeq.Add(1)
	keys := make([]string, cfg.Held)
	releases := make([]func(context.Context) error, cfg.Held)
	// Release whatever was acquired, even after a failure half-way.
	defer func() {
		_ = parallel(16, cfg.Held, func(i int) error {
			if releases[i] != nil {
				return releases[i](ctx)
			}
			return nil
		})
	}()
	if err := parallel(32, cfg.Held, func(i int) error {
		keys[i] = fmt.Sprintf("bench:cost:held:%d:%d", seq, i)
		rel, err := c.Acquire(ctx, keys[i])
		releases[i] = rel
		return err
	}); err != nil {
		return r, fmt.Errorf("locking %d names: %w", cfg.Held, err)
	}
	if err := settleWarm(ctx, srv); err != nil { // renewals are periodic: quiet comes between them
		return r, err
	}
	if r.KeysBefore, err = srv.DBSize(ctx); err != nil {
		return r, err
	}
	if err := srv.ResetStats(ctx); err != nil {
		return r, err
	}
	t0 := time.Now()
	select {
	case <-time.After(cfg.HeldFor):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	use, err := srv.SinceReset(ctx)
	window := time.Since(t0)
	if err != nil {
		return r, err
	}
	r.WindowS = window.Seconds()
	r.Commands, r.CommandStats, r.CPUUs = use.Total, use.Cmds, us(use.CPU)
	periods := float64(window) / float64(renewal)
	n := float64(cfg.Held)
	r.CmdsPerLockPeriod = float64(use.Total) / periods / n
	r.CPUPerLockPeriodUs = r.CPUUs / periods / n
	r.CPUPerLockSecUs = r.CPUUs / window.Seconds() / n
	r.CallsPerPeriod = float64(clientCalls(use.Cmds)) / periods
	r.KeysAfter, err = srv.DBSize(ctx)
	return r, err
}

// clientCalls is the calls a client sent: scripts and commands, without the
// commands scripts ran. It cannot tell a script's commands from a client's
// of the same name, so it only counts the calls that are never run inside a
// script (EVAL/EVALSHA/FCALL) when any script ran, and every call otherwise.
func clientCalls(cmds map[string]int64) int64 {
	var scripts, all int64
	for c, n := range cmds {
		all += n
		switch c {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			scripts += n
		}
	}
	if scripts > 0 {
		return scripts
	}
	return all
}

// costWaiting: p Clients waiting on one key another Client holds for the
// whole window; what Redis does per waiting process per second.
func costWaiting(ctx context.Context, srv *redisServer, lib Lib, p int, start, window time.Duration) (CostWaitRun, error) {
	r := CostWaitRun{Lib: lib.Name(), P: p}
	ctx, cancel := context.WithTimeout(ctx, costLimit)
	defer cancel()
	if err := srv.Flush(ctx); err != nil {
		return r, err
	}
	clients := make([]Client, 0, p+1)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for range p + 1 {
		c, err := lib.NewClient(srv.Addr)
		if err != nil {
			return r, fmt.Errorf("NewClient: %w", err)
		}
		clients = append(clients, c)
	}
	// Dial and load scripts (and let once-per-Client work finish) first.
	if err := warmUp(ctx, p+1, func(i int) Client { return clients[i] }, fmt.Sprintf("bench:warm:%d", runSeq.Add(1))); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	if err := settleWarm(ctx, srv); err != nil {
		return r, err
	}
	key := fmt.Sprintf("bench:cost:wait:%d", runSeq.Add(1))
	release, err := clients[0].Acquire(ctx, key)
	if err != nil {
		return r, fmt.Errorf("holder: %w", err)
	}
	waitCtx, stop := context.WithCancel(ctx)
	var granted atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, err := c.Acquire(waitCtx, key)
			if err == nil {
				granted.Add(1)
				_ = rel(context.WithoutCancel(ctx))
			}
		}()
	}
	// Let every waiter make its first attempt and start waiting
	// (subscriptions, client-side caching) before the window.
	time.Sleep(start)
	err = srv.ResetStats(ctx)
	t0 := time.Now()
	if err == nil {
		select {
		case <-time.After(window):
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	var use Usage
	if err == nil {
		use, err = srv.SinceReset(ctx)
	}
	elapsed := time.Since(t0)
	stop()
	wg.Wait()
	if rerr := release(context.WithoutCancel(ctx)); err == nil && rerr != nil {
		err = fmt.Errorf("holder release: %w", rerr)
	}
	if err != nil {
		return r, err
	}
	r.WindowS = elapsed.Seconds()
	r.Commands, r.CommandStats, r.CPUUs = use.Total, use.Cmds, us(use.CPU)
	r.CPUPerProcSecUs = r.CPUUs / float64(p) / elapsed.Seconds()
	r.CmdsPerProcSec = float64(use.Total) / float64(p) / elapsed.Seconds()
	r.Granted = int(granted.Load())
	return r, nil
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(workers, n int, f func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// Line is y ≈ A + B·x, least squares.
type Line struct {
	A, B float64
	// MaxRelDev is the largest |y - fit| / y over the points: how far the
	// straight line is from the worst point.
	MaxRelDev float64
	N         int
}

var errFewPoints = errors.New("a line needs two points with distinct x")

// fitLine fits y ≈ A + B·x by ordinary least squares.
func fitLine(xs, ys []float64) (Line, error) {
	n := len(xs)
	if n != len(ys) || n < 2 {
		return Line{}, errFewPoints
	}
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/float64(n), sy/float64(n)
	var sxx, sxy float64
	for i := range xs {
		dx := xs[i] - mx
		sxx += dx * dx
		sxy += dx * (ys[i] - my)
	}
	if sxx == 0 {
		return Line{}, errFewPoints
	}
	l := Line{B: sxy / sxx, N: n}
	l.A = my - l.B*mx
	for i := range xs {
		if ys[i] != 0 {
			l.MaxRelDev = math.Max(l.MaxRelDev, math.Abs(ys[i]-(l.A+l.B*xs[i]))/math.Abs(ys[i]))
		}
	}
	return l, nil
}

// String renders the line as "a + b·x" with three significant digits.
func (l Line) String(x string) string {
	sign, b := "+", l.B
	if b < 0 {
		sign, b = "−", -b
	}
	return fmt.Sprintf("%s %s %s·%s", fmtNum(l.A), sign, fmtNum(b), x)
}
