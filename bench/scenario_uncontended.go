package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// UncontendedConfig is scenario (a): G goroutines of one Client (one app
// server), each acquiring and releasing its own key in a loop for Duration.
type UncontendedConfig struct {
	G        int
	Duration time.Duration
	PingFor  time.Duration // G=1: PINGs through the lib's client, half before and half after the run
}

// UncontendedRun is one run of scenario (a) for one Lib.
type UncontendedRun struct {
	Lib        string  `json:"lib"`
	G          int     `json:"goroutines"`
	Rep        int     `json:"rep"`
	Pairs      int64   `json:"pairs"`
	Seconds    float64 `json:"seconds"`
	PairsPerS  float64 `json:"pairs_per_s"`
	PairP50Us  float64 `json:"pair_p50_us"`
	PairP99Us  float64 `json:"pair_p99_us"`
	AllocsPair float64 `json:"allocs_per_pair"`
	BytesPair  float64 `json:"bytes_per_pair"`
	CmdsPair   float64 `json:"cmds_per_pair"`
	CPUPairUs  float64 `json:"redis_cpu_per_pair_us"` // Redis main-thread CPU per pair
	// ClientCPUPairUs is the bench process's CPU time (user + system, every
	// thread) per pair: the lib's client cost, with the loop's own small
	// part; 0 where the OS does not report it.
	ClientCPUPairUs float64 `json:"client_cpu_per_pair_us,omitempty"`
	// CommandUsec is the time Redis spent in each command (µs) over the
	// run, from INFO commandstats; nil where not measured (a Cluster).
	CommandUsec map[string]int64 `json:"command_usec,omitempty"`
	// BusMsgs: cluster bus publish messages over the run (cluster scenario).
	BusMsgs int64 `json:"bus_msgs,omitempty"`
	// PingP50Us is the p50 of sequential PINGs through the lib's own client
	// right before and right after the run (G=1 only, 0 when the adapter
	// cannot ping), and PairPings the pair's p50 in such round trips.
	PingP50Us  float64 `json:"ping_p50_us,omitempty"`
	PairPings  float64 `json:"pair_p50_in_pings,omitempty"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
}

func (r *UncontendedRun) Problems() []string {
	var p []string
	if r.Errors > 0 {
		p = append(p, fmt.Sprintf("%d errors (first: %s)", r.Errors, r.FirstError))
	}
	if r.Pairs == 0 {
		p = append(p, "no pair completed")
	}
	return p
}

func runUncontended(ctx context.Context, srv target, lib Lib, cfg UncontendedConfig, rep int) (UncontendedRun, error) {
	r := UncontendedRun{Lib: lib.Name(), G: cfg.G, Rep: rep}
	if err := srv.Flush(ctx); err != nil {
		return r, err
	}
	c, err := lib.NewClient(srv.dialAddr())
	if err != nil {
		return r, fmt.Errorf("%s: NewClient: %w", lib.Name(), err)
	}
	defer c.Close()
	seq := runSeq.Add(1)
	keys := make([]string, cfg.G)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:u:%d:%d", seq, i)
	}
	if err := warmUp(ctx, cfg.G, func(int) Client { return c }, fmt.Sprintf("bench:warm:%d", seq)); err != nil {
		return r, fmt.Errorf("%s: warm-up: %w", lib.Name(), err)
	}
	if err := settleWarm(ctx, srv); err != nil {
		return r, err
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration+30*time.Second)
	defer cancel()

	hists := make([]*hist, cfg.G)
	counts := make([]int64, cfg.G)
	for i := range hists {
		hists[i] = new(hist)
	}
	var (
		errs     atomic.Int64
		errOnce  sync.Once
		firstErr string
		wg       sync.WaitGroup
		start    = make(chan struct{})
		end      time.Time
	)
	// G=1: PINGs through the lib's own client, half right before the run
	// and half right after, so that the comparison sees the conditions of
	// the run (on a shared VM, round trips drift between runs).
	pinger, _ := c.(Pinger)
	if cfg.G != 1 || cfg.PingFor <= 0 {
		pinger = nil
	}
	pings := new(hist)
	if pinger != nil {
		if err := pingFor(ctx, pinger, cfg.PingFor/2, pings); err != nil {
			return r, fmt.Errorf("%s: PING: %w", lib.Name(), err)
		}
	}
	if err := srv.ResetStats(ctx); err != nil {
		return r, err
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU()
	for i := range cfg.G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := hists[i]
			<-start
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				release, err := c.Acquire(runCtx, keys[i])
				if err == nil {
					err = release(runCtx)
				}
				if err != nil {
					errs.Add(1)
					errOnce.Do(func() { firstErr = err.Error() })
					if runCtx.Err() != nil {
						return
					}
					continue
				}
				h.Record(time.Since(t0))
				counts[i]++
			}
		}()
	}
	begin := time.Now()
	end = begin.Add(cfg.Duration) // written before close(start)
	close(start)
	wg.Wait()
	elapsed := time.Since(begin)
	cpu1 := processCPU()
	runtime.ReadMemStats(&m1)

	use, err := srv.SinceReset(ctx)
	if err != nil {
		return r, err
	}
	if pinger != nil {
		if err := pingFor(ctx, pinger, cfg.PingFor/2, pings); err != nil {
			return r, fmt.Errorf("%s: PING: %w", lib.Name(), err)
		}
		r.PingP50Us = us(pings.Quantile(0.50))
	}
	all := new(hist)
	for i, h := range hists {
		all.Merge(h)
		r.Pairs += counts[i]
	}
	r.Seconds = elapsed.Seconds()
	r.BusMsgs = use.Bus
	r.CommandUsec = use.Usec
	r.Errors = errs.Load()
	r.FirstError = firstErr
	if r.Pairs > 0 {
		r.PairsPerS = float64(r.Pairs) / elapsed.Seconds()
		r.AllocsPair = float64(m1.Mallocs-m0.Mallocs) / float64(r.Pairs)
		r.BytesPair = float64(m1.TotalAlloc-m0.TotalAlloc) / float64(r.Pairs)
		r.CmdsPair = float64(use.Total) / float64(r.Pairs)
		r.CPUPairUs = us(use.CPU) / float64(r.Pairs)
		r.ClientCPUPairUs = us(cpu1-cpu0) / float64(r.Pairs)
	}
	r.PairP50Us = us(all.Quantile(0.50))
	r.PairP99Us = us(all.Quantile(0.99))
	if r.PingP50Us > 0 {
		r.PairPings = r.PairP50Us / r.PingP50Us
	}
	return r, nil
}

// pingFor sends sequential PINGs through p for d, recording each in h.
func pingFor(ctx context.Context, p Pinger, d time.Duration, h *hist) error {
	for end := time.Now().Add(d); time.Now().Before(end); {
		t0 := time.Now()
		if err := p.Ping(ctx); err != nil {
			return err
		}
		h.Record(time.Since(t0))
	}
	return nil
}
