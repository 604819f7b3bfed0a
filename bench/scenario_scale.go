//go:build !nodlock

// Built by default; -tags nodlock leaves dlock out (for when the parent
// module does not compile mid-change: the peers still run).

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// Scenario (d), dlock only: scale of one process. Run once (not R times):
// it takes about a minute and its figures are counts, not latencies under noise.

type scaleConfig struct {
	Held     int           // locks held by one Client
	Watchdog time.Duration // its watchdog timeout
	Waiters  int           // waiters, spread over Names names
	Names    int
	Settle   time.Duration // how long the waiters wait before memory is read
}

// renewal is dlock's renewal period: it renews watchdog-mode holds every
// third of the watchdog timeout (see dlock.WithWatchdogTimeout).
func (c scaleConfig) renewal() time.Duration { return c.Watchdog / 3 }

// window covers two whole watchdog periods (six renewal periods).
func (c scaleConfig) window() time.Duration { return 2 * c.Watchdog }

// defaultScale's watchdog keeps the renewals of its 100,000 holds at a
// third of Redis's time or less on a slow 2-vCPU host (9 µs of Redis CPU
// per renewed lock on an AMD EPYC VM whose PING took 47 µs, Redis sharing
// the cores with this process): with 3 s (a renewal every second) Redis
// spent nearly the whole period renewing, a figure of the host's saturation
// rather than of scale.
var defaultScale = scaleConfig{Held: 100000, Watchdog: 9 * time.Second, Waiters: 10000, Names: 1000, Settle: 3 * time.Second}

func init() {
	scaleRunner = func(ctx context.Context, srv *redisServer, progress io.Writer) (*ScaleResult, error) {
		return runScale(ctx, srv, defaultScale, progress)
	}
}

func runScale(ctx context.Context, srv *redisServer, cfg scaleConfig, progress io.Writer) (*ScaleResult, error) {
	res := &ScaleResult{Lib: "dlock", HeldLocks: cfg.Held, WatchdogS: cfg.Watchdog.Seconds(), RenewalPeriodS: cfg.renewal().Seconds(), Waiters: cfg.Waiters, Names: cfg.Names}
	if err := srv.Flush(ctx); err != nil {
		return nil, err
	}
	if err := scaleHeldLocks(ctx, srv, cfg, progress, res); err != nil {
		return res, err
	}
	if err := srv.Flush(ctx); err != nil {
		return res, err
	}
	return res, scaleWaitersRun(ctx, srv, cfg, progress, res)
}

// scaleHeldLocks: 100,000 locks held by one Client in watchdog mode; Redis
// commands per renewal period, measured over two watchdog periods.
func scaleHeldLocks(ctx context.Context, srv *redisServer, cfg scaleConfig, progress io.Writer, res *ScaleResult) error {
	c, err := newDlockClient(srv.Addr, dlock.WithWatchdogTimeout(cfg.Watchdog))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(progress, "[d scale] locking %d names on one client (watchdog %v)\n", cfg.Held, cfg.Watchdog)
	mus := make([]*dlock.Mutex, cfg.Held)
	names := make([]string, cfg.Held)
	t0 := time.Now()
	err = parallel(32, cfg.Held, func(i int) error {
		names[i] = fmt.Sprintf("bench:scale:held:%d", i)
		mus[i] = c.c.Mutex(names[i])
		return mus[i].Lock(ctx)
	})
	res.AcquireAllSeconds = time.Since(t0).Seconds()
	if err != nil {
		return fmt.Errorf("locking %d names: %w", cfg.Held, err)
	}
	if err := settleWarm(ctx, srv); err != nil { // renewals are periodic: quiet comes between them
		return err
	}
	if err := srv.ResetStats(ctx); err != nil {
		return err
	}
	fmt.Fprintf(progress, "[d scale] holding for %v (%d renewal periods of %v)\n", cfg.window(), cfg.window()/cfg.renewal(), cfg.renewal())
	select {
	case <-time.After(cfg.window()):
	case <-ctx.Done():
		return ctx.Err()
	}
	use, err := srv.SinceReset(ctx)
	if err != nil {
		return err
	}
	res.MeasuredS = cfg.window().Seconds()
	res.HeldCommands = use.Total
	res.HeldCommandStats = use.Cmds
	periods := float64(cfg.window()) / float64(cfg.renewal())
	res.CmdsPerPeriod = float64(use.Total) / periods
	res.CmdsPerLockPeriod = res.CmdsPerPeriod / float64(cfg.Held)
	res.CPUPerLockPeriodUs = us(use.CPU) / periods / float64(cfg.Held)
	if res.KeysAliveAfter, err = srv.admin.Exists(ctx, names...).Result(); err != nil {
		return err
	}
	return parallel(32, cfg.Held, func(i int) error { return mus[i].Unlock(ctx) })
}

// scaleWaitersRun: 10,000 waiters on 1,000 names (10 per name) in one
// Client while another Client holds the names; memory per waiter once they
// are all waiting, then the wake latency of every hand-off as the holders
// release and each waiter releases as soon as it is granted.
func scaleWaitersRun(ctx context.Context, srv *redisServer, cfg scaleConfig, progress io.Writer, res *ScaleResult) error {
	holders, err := newDlockClient(srv.Addr)
	if err != nil {
		return err
	}
	defer holders.Close()
	waiters, err := newDlockClient(srv.Addr)
	if err != nil {
		return err
	}
	defer waiters.Close()

	names := make([]string, cfg.Names)
	held := make([]*dlock.Mutex, cfg.Names)
	for i := range names {
		names[i] = fmt.Sprintf("bench:scale:wait:%d", i)
	}
	fmt.Fprintf(progress, "[d scale] holding %d names, starting %d waiters\n", cfg.Names, cfg.Waiters)
	if err := parallel(16, cfg.Names, func(i int) error {
		held[i] = holders.c.Mutex(names[i])
		return held[i].Lock(ctx)
	}); err != nil {
		return fmt.Errorf("holding %d names: %w", cfg.Names, err)
	}
	// Warm the waiter client's connections and pub/sub.
	if err := warmUp(ctx, 16, func(int) Client { return waiters }, "bench:scale:warm"); err != nil {
		return err
	}
	if err := settleWarm(ctx, srv); err != nil { // the doctor's goroutine ends before g0 is read
		return err
	}

	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var (
		inCS        = make([]atomic.Int32, cfg.Names)
		lastRelease = make([]atomic.Int64, cfg.Names) // ns since base: release start of the last holder
		violations  atomic.Int64
		errs        atomic.Int64
		errOnce     sync.Once
		mu          sync.Mutex
		gaps        = make([]time.Duration, 0, cfg.Waiters)
		wg          sync.WaitGroup
		base        = time.Now()
		m0, m1      runtime.MemStats
	)
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	for j := range cfg.Waiters {
		n := j % cfg.Names
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := waiters.c.Mutex(names[n])
			if err := m.Lock(runCtx); err != nil {
				errs.Add(1)
				errOnce.Do(func() { res.FirstError = err.Error() })
				return
			}
			granted := time.Since(base)
			if inCS[n].Add(1) > 1 {
				violations.Add(1)
			}
			gap := granted - time.Duration(lastRelease[n].Load())
			mu.Lock()
			gaps = append(gaps, gap)
			mu.Unlock()
			inCS[n].Add(-1)
			lastRelease[n].Store(int64(time.Since(base)))
			if err := m.Unlock(context.WithoutCancel(runCtx)); err != nil {
				errs.Add(1)
				errOnce.Do(func() { res.FirstError = "unlock: " + err.Error() })
			}
		}()
	}
	select {
	case <-time.After(cfg.Settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	res.HeapPerWaiterBytes = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(cfg.Waiters)
	res.StackPerWaiterBytes = (float64(m1.StackInuse) - float64(m0.StackInuse)) / float64(cfg.Waiters)
	res.GoroutinesPerWaiter = float64(g1-g0) / float64(cfg.Waiters)
	fmt.Fprintf(progress, "[d scale] %.0f heap bytes and %.2f goroutines per waiter; releasing the holders\n", res.HeapPerWaiterBytes, res.GoroutinesPerWaiter)

	if err := srv.ResetStats(ctx); err != nil {
		return err
	}
	drain := time.Now()
	relErr := parallel(8, cfg.Names, func(i int) error {
		lastRelease[i].Store(int64(time.Since(base)))
		return held[i].Unlock(ctx)
	})
	wg.Wait()
	res.DrainSeconds = time.Since(drain).Seconds()
	use, err := srv.SinceReset(ctx)
	if err != nil {
		return err
	}
	res.Grants = len(gaps)
	if res.Grants > 0 {
		res.DrainCmdsPerGrant = float64(use.Total) / float64(res.Grants)
		res.DrainCPUPerGrantUs = us(use.CPU) / float64(res.Grants)
	}
	res.Violations = violations.Load()
	res.Errors = errs.Load()
	res.WakeP50Ms = ms(quantile(gaps, 0.50))
	res.WakeP99Ms = ms(quantile(gaps, 0.99))
	res.WakeMaxMs = ms(quantile(gaps, 1))
	fmt.Fprintf(progress, "[d scale] %d grants drained in %.2f s, wake p50 %.2f ms p99 %.2f ms\n", res.Grants, res.DrainSeconds, res.WakeP50Ms, res.WakeP99Ms)
	if relErr != nil {
		return fmt.Errorf("holders' unlock: %w", relErr)
	}
	if res.Grants != cfg.Waiters && res.Errors == 0 {
		return errors.New("grants missing")
	}
	return nil
}
