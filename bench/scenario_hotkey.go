package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// HotkeyConfig is scenario (b): W goroutines, each doing K acquisitions of
// one hot key and holding it Hold (a sleep) inside the critical section.
type HotkeyConfig struct {
	W, K int
	Hold time.Duration
	// Shared: all W goroutines use one Client (one app server). Otherwise
	// each goroutine has its own Client (W app servers: the distributed case).
	Shared bool
	// Timeout bounds the whole run (the context deadline given to every
	// Acquire). 0 = 10s + 10 x ideal.
	Timeout time.Duration
}

func (c HotkeyConfig) Mode() string {
	if c.Shared {
		return "shared"
	}
	return "separate"
}

func (c HotkeyConfig) Ideal() time.Duration { return time.Duration(c.W*c.K) * c.Hold }

// HotkeyRun is the outcome of one run of one Lib.
type HotkeyRun struct {
	Lib  string `json:"lib"`
	W    int    `json:"w"`
	K    int    `json:"k"`
	Mode string `json:"mode"`
	Rep  int    `json:"rep"`

	Grants        int    `json:"grants"`
	Expected      int    `json:"expected_grants"`
	AcquireErrors int    `json:"acquire_errors"`
	ReleaseErrors int    `json:"release_errors"`
	FirstError    string `json:"first_error,omitempty"`
	TimedOut      bool   `json:"timed_out"` // the run's deadline expired
	// Violations counts grants that found the in-critical-section counter
	// already at >= 1; Overlaps counts grants (in grant order) that came
	// before the previous holder started releasing. Both must be 0.
	Violations int64 `json:"violations"`
	Overlaps   int   `json:"overlaps"`
	MaxInCS    int64 `json:"max_in_cs"`
	// AdapterRewaits counts waits the adapter abandoned and restarted (see
	// rewaitCounter); 0 for libraries that need no workaround.
	AdapterRewaits int64 `json:"adapter_rewaits"`

	WallMs     float64 `json:"wall_ms"`
	IdealMs    float64 `json:"ideal_ms"`
	Efficiency float64 `json:"efficiency"` // ideal / wall
	HoldMeanMs float64 `json:"hold_mean_ms"`
	WaitP50Ms  float64 `json:"wait_p50_ms"`
	WaitP99Ms  float64 `json:"wait_p99_ms"`
	GapP50Ms   float64 `json:"gap_p50_ms"`
	GapP99Ms   float64 `json:"gap_p99_ms"`
	GapMeanMs  float64 `json:"gap_mean_ms"`

	Commands     int64            `json:"commands"`
	CmdsPerGrant float64          `json:"cmds_per_grant"`
	CPUGrantUs   float64          `json:"redis_cpu_per_grant_us"` // Redis main-thread CPU per grant
	CommandStats map[string]int64 `json:"command_stats"`
	// CommandUsec is the time Redis spent in each command (µs), from
	// INFO commandstats; nil where not measured (a Cluster).
	CommandUsec map[string]int64 `json:"command_usec,omitempty"`
	// BusMsgs is the cluster bus publish messages sent during the run,
	// summed over a Cluster's nodes (the cluster scenario; 0 otherwise).
	BusMsgs int64 `json:"bus_msgs,omitempty"`
}

// Problems lists what makes this run invalid: broken mutual exclusion, or
// fewer grants than asked for.
func (r *HotkeyRun) Problems() []string {
	var p []string
	if r.Violations > 0 || r.Overlaps > 0 {
		p = append(p, fmt.Sprintf("MUTUAL EXCLUSION VIOLATED: %d violations, %d overlaps, up to %d holders at once", r.Violations, r.Overlaps, r.MaxInCS))
	}
	if r.Grants != r.Expected {
		p = append(p, fmt.Sprintf("%d of %d grants (%d acquire errors, first: %s)", r.Grants, r.Expected, r.AcquireErrors, r.FirstError))
	}
	if r.ReleaseErrors > 0 {
		p = append(p, fmt.Sprintf("%d release errors (first: %s)", r.ReleaseErrors, r.FirstError))
	}
	return p
}

type hotEvent struct {
	grant   time.Duration // since run start, monotonic
	release time.Duration // release start
}

var runSeq atomic.Int64

// runHotkey runs scenario (b) once for lib. The returned error is a setup
// failure (Redis, client creation); measured failures are in the run and
// reported by Problems.
func runHotkey(ctx context.Context, srv target, lib Lib, cfg HotkeyConfig, rep int) (HotkeyRun, error) {
	r := HotkeyRun{Lib: lib.Name(), W: cfg.W, K: cfg.K, Mode: cfg.Mode(), Rep: rep, Expected: cfg.W * cfg.K, IdealMs: ms(cfg.Ideal())}
	if err := srv.Flush(ctx); err != nil {
		return r, err
	}
	nClients := cfg.W
	if cfg.Shared {
		nClients = 1
	}
	clients := make([]Client, 0, nClients)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for range nClients {
		c, err := lib.NewClient(srv.dialAddr())
		if err != nil {
			return r, fmt.Errorf("%s: NewClient: %w", lib.Name(), err)
		}
		clients = append(clients, c)
	}
	clientOf := func(i int) Client {
		if cfg.Shared {
			return clients[0]
		}
		return clients[i]
	}
	seq := runSeq.Add(1)

	// Warm-up: one acquisition per goroutine on its own key, so connections
	// are dialed and scripts loaded before the counters are reset.
	if err := warmUp(ctx, cfg.W, clientOf, fmt.Sprintf("bench:warm:%d", seq)); err != nil {
		return r, fmt.Errorf("%s: warm-up: %w", lib.Name(), err)
	}
	if err := settleWarm(ctx, srv); err != nil {
		return r, err
	}

	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 10*time.Second + 10*cfg.Ideal()
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key := fmt.Sprintf("bench:hot:%d", seq)

	if err := srv.ResetStats(ctx); err != nil {
		return r, err
	}
	rewaits0 := rewaits(lib)

	var (
		inCS, maxInCS, violations atomic.Int64
		acqErrs, relErrs          atomic.Int64
		errOnce                   sync.Once
		firstErr                  string
		mu                        sync.Mutex
		events                    = make([]hotEvent, 0, cfg.W*cfg.K)
		waits                     = make([][]time.Duration, cfg.W)
		start                     = make(chan struct{})
		base                      time.Time
		wg                        sync.WaitGroup
	)
	noteErr := func(err error) { errOnce.Do(func() { firstErr = err.Error() }) }
	for i := range cfg.W {
		waits[i] = make([]time.Duration, 0, cfg.K)
		c := clientOf(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range cfg.K {
				t0 := time.Now()
				release, err := c.Acquire(runCtx, key)
				tg := time.Now()
				if err != nil {
					acqErrs.Add(1)
					noteErr(err)
					if runCtx.Err() != nil {
						return
					}
					continue
				}
				n := inCS.Add(1)
				if n > 1 {
					violations.Add(1)
				}
				for {
					m := maxInCS.Load()
					if n <= m || maxInCS.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(cfg.Hold)
				inCS.Add(-1)
				tr := time.Now()
				mu.Lock()
				events = append(events, hotEvent{grant: tg.Sub(base), release: tr.Sub(base)})
				mu.Unlock()
				waits[i] = append(waits[i], tg.Sub(t0))
				relCtx, relCancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := release(relCtx); err != nil {
					relErrs.Add(1)
					noteErr(fmt.Errorf("release: %w", err))
				}
				relCancel()
			}
		}()
	}
	base = time.Now() // written before close(start), read after <-start
	close(start)
	wg.Wait()
	wall := time.Since(base)
	r.AdapterRewaits = rewaits(lib) - rewaits0

	use, err := srv.SinceReset(ctx)
	if err != nil {
		return r, err
	}

	r.TimedOut = runCtx.Err() != nil
	r.Grants = len(events)
	r.AcquireErrors = int(acqErrs.Load())
	r.ReleaseErrors = int(relErrs.Load())
	r.FirstError = firstErr
	r.Violations = violations.Load()
	r.MaxInCS = maxInCS.Load()
	r.WallMs = ms(wall)
	if wall > 0 {
		r.Efficiency = float64(cfg.Ideal()) / float64(wall)
	}
	r.Commands = use.Total
	r.CommandStats = use.Cmds
	r.CommandUsec = use.Usec
	r.BusMsgs = use.Bus
	if r.Grants > 0 {
		r.CmdsPerGrant = float64(use.Total) / float64(r.Grants)
		r.CPUGrantUs = us(use.CPU) / float64(r.Grants)
	}

	var allWaits []time.Duration
	for _, w := range waits {
		allWaits = append(allWaits, w...)
	}
	r.WaitP50Ms = ms(quantile(allWaits, 0.50))
	r.WaitP99Ms = ms(quantile(allWaits, 0.99))

	slices.SortFunc(events, func(a, b hotEvent) int { return int(a.grant - b.grant) })
	var gaps []time.Duration
	var holdSum, gapSum time.Duration
	for i, e := range events {
		holdSum += e.release - e.grant
		if i == 0 {
			continue
		}
		g := e.grant - events[i-1].release
		if g < 0 {
			r.Overlaps++
		}
		gaps = append(gaps, g)
		gapSum += g
	}
	if len(events) > 0 {
		r.HoldMeanMs = ms(holdSum / time.Duration(len(events)))
	}
	if len(gaps) > 0 {
		r.GapMeanMs = ms(gapSum / time.Duration(len(gaps)))
	}
	r.GapP50Ms = ms(quantile(gaps, 0.50))
	r.GapP99Ms = ms(quantile(gaps, 0.99))
	return r, nil
}

// warmUp makes n goroutines do one acquire+release each, on distinct keys,
// through clientOf(i).
func warmUp(ctx context.Context, n int, clientOf func(int) Client, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, err := clientOf(i).Acquire(ctx, fmt.Sprintf("%s:%d", prefix, i))
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = release(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
