package dlockprom_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/internal/testenv"
)

var shared *testenv.Redis

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, "dlockprom", &shared, nil)) }

func newClient(t *testing.T, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(shared.NewClient(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func lint(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// value returns the value of the counter or gauge name (its only series).
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%s has %d series", name, len(mf.GetMetric()))
		}
		mt := mf.GetMetric()[0]
		if g := mt.GetGauge(); g != nil {
			return g.GetValue()
		}
		return mt.GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// eventually waits a little for name to reach want: a loss is reported to
// observers just after the holder's Done channel is closed.
func eventually(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := value(t, reg, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSequence drives a known sequence of lock calls and checks every metric.
func TestSequence(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	c1 := newClient(t, dlock.WithObserver(m), dlock.WithWatchdogTimeout(150*time.Millisecond))
	c2 := newClient(t, dlock.WithObserver(m))

	// 1. A grant and a re-entry (not counted), held ~20ms.
	a := c1.Mutex("prom-a")
	actx, err := a.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := a.TryLock(actx, 0, 0); !ok || err != nil { // re-entry along the hold's context
		t.Fatal(ok, err)
	}
	// 2. Another owner: one attempt with no wait, one with a 50ms wait.
	b := c2.Mutex("prom-a")
	if ok, err := b.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := b.TryLock(ctx, 50*time.Millisecond, 0); ok || err != nil {
		t.Fatal(ok, err)
	}
	// 3. A cancelled context: an error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.TryLock(cctx, time.Second, 0); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	held := func(want float64) {
		t.Helper()
		eventually(t, reg, "dlock_held", want)
	}
	held(1)
	// Let the watchdog (every 50ms) renew a few times.
	time.Sleep(200 * time.Millisecond)
	if err := a.Unlock(ctx); err != nil { // count 2 -> 1: not final
		t.Fatal(err)
	}
	held(1)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	held(0)

	// 4. A hold lost to a forced unlock, then Unlock reports the loss.
	l := c1.Mutex("prom-lost")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held(1)
	if ok, err := c2.Mutex("prom-lost").ForceUnlock(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loss not noticed")
	}
	held(0)
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock after loss: %v", err)
	}
	held(0)

	want := `
# HELP dlock_acquire_attempts_total Lock acquisitions that ended, by lock kind (re-entries excluded).
# TYPE dlock_acquire_attempts_total counter
dlock_acquire_attempts_total{kind="mutex"} 5
# HELP dlock_acquire_errors_total Lock acquisitions that failed with an error (Redis, cancelled context, closed client), by lock kind.
# TYPE dlock_acquire_errors_total counter
dlock_acquire_errors_total{kind="mutex"} 1
# HELP dlock_acquired_total Lock acquisitions that were granted, by lock kind.
# TYPE dlock_acquired_total counter
dlock_acquired_total{kind="mutex"} 2
# HELP dlock_held Locks currently held through the observed clients, by lock kind.
# TYPE dlock_held gauge
dlock_held{kind="mutex"} 0
# HELP dlock_lost_total Holds that ended without Unlock: renewal found another owner or could not confirm the hold in time, or a lease expired.
# TYPE dlock_lost_total counter
dlock_lost_total{kind="mutex"} 1
# HELP dlock_wait_timeouts_total Lock acquisitions whose wait time ran out, by lock kind.
# TYPE dlock_wait_timeouts_total counter
dlock_wait_timeouts_total{kind="mutex"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"dlock_acquire_attempts_total", "dlock_acquire_errors_total", "dlock_acquired_total",
		"dlock_held", "dlock_lost_total", "dlock_wait_timeouts_total"); err != nil {
		t.Fatal(err)
	}
	// Histograms: 5 waits observed, 2 holds (the lost one's Unlock reports
	// its duration too), the 50ms wait in a bucket above 50ms.
	if n := testutil.CollectAndCount(reg, "dlock_wait_duration_seconds"); n != 1 {
		t.Fatalf("wait histogram series: %d", n)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		switch mf.GetName() {
		case "dlock_wait_duration_seconds":
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 5 || h.GetSampleSum() < 0.05 {
				t.Fatalf("wait histogram: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
			}
		case "dlock_hold_duration_seconds":
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 2 || h.GetSampleSum() < 0.2 {
				t.Fatalf("hold histogram: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
			}
		case "dlock_renewals_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v < 1 {
				t.Fatalf("renewals %v, want some in 200ms at a 50ms period", v)
			}
		case "dlock_renewal_failures_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 0 {
				t.Fatalf("renewal failures %v", v)
			}
		}
	}
	lint(t, reg)
}

func TestRenewalFailures(t *testing.T) {
	r := testenv.StartRedis(t)
	reg := prometheus.NewRegistry()
	m, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dlock.New(r.NewClient(t), dlock.WithObserver(m), dlock.WithWatchdogTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mu := c.Mutex("prom-renew")
	if err := mu.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-mu.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loss not noticed with Redis down")
	}
	fails := value(t, reg, "dlock_renewal_failures_total")
	if fails < 1 {
		t.Fatalf("renewal failures %v", fails)
	}
	eventually(t, reg, "dlock_held", 0)
}

func TestRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := dlockprom.New(reg); err != nil {
		t.Fatal(err)
	}
	// A second set on the same registry collides, and registers nothing.
	if _, err := dlockprom.New(reg); err == nil {
		t.Fatal("second New on one registry succeeded")
	}
	// Namespaced and labelled sets coexist.
	m2, err := dlockprom.New(reg, dlockprom.WithNamespace("shop"), dlockprom.WithConstLabels(prometheus.Labels{"redis": "main"}))
	if err != nil {
		t.Fatal(err)
	}
	m2.Renewed(3, nil)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shop_dlock_renewals_total Locks carried by watchdog renewal calls.
# TYPE shop_dlock_renewals_total counter
shop_dlock_renewals_total{redis="main"} 3
`), "shop_dlock_renewals_total"); err != nil {
		t.Fatal(err)
	}
	// Nothing went to the global registry.
	mfs, _ := prometheus.DefaultGatherer.Gather()
	for _, mf := range mfs {
		if strings.Contains(mf.GetName(), "dlock") {
			t.Fatalf("%s registered globally", mf.GetName())
		}
	}
	for _, bad := range []dlockprom.Option{
		dlockprom.WithNamespace("1x"), dlockprom.WithNamespace(""),
		dlockprom.WithConstLabels(prometheus.Labels{"kind": "x"}),
		dlockprom.WithWaitBuckets(), dlockprom.WithHoldBuckets(2, 1), nil,
	} {
		if _, err := dlockprom.New(prometheus.NewRegistry(), bad); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("bad option: %v", err)
		}
	}
	if _, err := dlockprom.New(nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("nil registerer: %v", err)
	}
	lint(t, reg)
}

// No lock name ever becomes a label.
func TestNoNameLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, dlock.WithObserver(m))
	for i := range 20 {
		if err := c.WithLock(ctxT(t), fmt.Sprintf("prom-name-%d", i), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if len(mf.GetMetric()) > 1 {
			t.Fatalf("%s has %d series", mf.GetName(), len(mf.GetMetric()))
		}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			if strings.Contains(l.GetValue(), "prom-name") {
				t.Fatalf("%s carries a lock name", mf.GetName())
			}
		}
	}
}

// A hold ended by its MaxHold counts in max_hold_exceeded_total as well as
// in lost_total; a loss of another kind counts only in lost_total.
func TestMaxHoldExceeded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, dlock.WithObserver(m), dlock.WithMaxHold(100*time.Millisecond))
	ctx := ctxT(t)
	l := c.Mutex("prom-maxhold")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("MaxHold did not end the hold")
	}
	eventually(t, reg, "dlock_max_hold_exceeded_total", 1)
	eventually(t, reg, "dlock_lost_total", 1)
	_ = l.Unlock(ctx)

	f := c.Mutex("prom-forced")
	if err := f.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := newClient(t).Mutex("prom-forced").ForceUnlock(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	<-f.Done()
	eventually(t, reg, "dlock_lost_total", 2)
	if v := value(t, reg, "dlock_max_hold_exceeded_total"); v != 1 {
		t.Fatalf("a forced loss counted as MaxHold: %v", v)
	}
	_ = f.Unlock(ctx)
}

// A hold renewed past WithLongHoldAlert is counted once, while it is still
// held; a short hold is not.
func TestLongHolds(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, dlock.WithObserver(m), dlock.WithWatchdogTimeout(300*time.Millisecond),
		dlock.WithLongHoldAlert(250*time.Millisecond))
	ctx := ctxT(t)
	short := c.Mutex("prom-short")
	if err := short.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = short.Unlock(ctx)
	l := c.Mutex("prom-long")
	if err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// The series appears with the first report (a counter vector has none
	// before), within a few renewals of 100ms.
	deadline := time.Now().Add(5 * time.Second)
	for !hasMetric(t, reg, "dlock_long_holds_total") {
		if time.Now().After(deadline) {
			t.Fatal("the long hold was never counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(400 * time.Millisecond) // more renewals: still one
	if v := value(t, reg, "dlock_long_holds_total"); v != 1 {
		t.Fatalf("dlock_long_holds_total = %v, want 1 (once per hold)", v)
	}
	_ = l.Unlock(ctx)
}

func hasMetric(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return true
		}
	}
	return false
}

// Semaphore permits are holds of kind "semaphore" (a Permit counts once in
// dlock_held however many permits it takes), and
// dlock_semaphore_permits_held sums their weight: up by n at a grant, down
// by n at the Release, a lost permit's included, and at Close.
func TestSemaphorePermits(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	c := newClient(t, dlock.WithObserver(m))
	s := c.Semaphore("prom-sem", 5)
	p3, err := s.AcquireN(ctx, 3, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := s.Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	permits := func(want float64) {
		t.Helper()
		eventually(t, reg, "dlock_semaphore_permits_held", want)
	}
	permits(4)
	eventually(t, reg, "dlock_held", 2)
	if p, err := s.AcquireN(ctx, 2, 0, 0); p != nil || !errors.Is(err, dlock.ErrWaitTimeout) { // 4 of 5 taken: no room for 2
		t.Fatal(p, err)
	}
	if err := p3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	permits(1)

	// A permit whose lease ends is lost: dlock_held drops at once, its
	// permits at its Release.
	p2, err := s.AcquireN(ctx, 2, 0, 100*time.Millisecond)
	if err != nil || p2 == nil {
		t.Fatal(p2, err)
	}
	permits(3)
	select {
	case <-p2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not end")
	}
	eventually(t, reg, "dlock_held", 1)
	permits(3)
	if err := p2.Release(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Release of a lost permit: %v", err)
	}
	permits(1)

	// Close releases another Client's permits, and counts them out.
	c2, err := dlock.New(shared.NewClient(t), dlock.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c2.Semaphore("prom-sem", 5).AcquireN(ctx, 2, 0, 0); err != nil || p == nil {
		t.Fatal(p, err)
	}
	permits(3)
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	permits(1)
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	permits(0)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP dlock_acquired_total Lock acquisitions that were granted, by lock kind.
# TYPE dlock_acquired_total counter
dlock_acquired_total{kind="semaphore"} 4
# HELP dlock_wait_timeouts_total Lock acquisitions whose wait time ran out, by lock kind.
# TYPE dlock_wait_timeouts_total counter
dlock_wait_timeouts_total{kind="semaphore"} 1
`), "dlock_acquired_total", "dlock_wait_timeouts_total"); err != nil {
		t.Fatal(err)
	}
	lint(t, reg)
}

// dlockprom counts a latch's count-downs and the Waits that saw it open,
// and the calls of either that failed; a call refused for its arguments is
// not counted.
func TestLatchMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	c := newClient(t, dlock.WithObserver(m))
	l := c.CountDownLatch("prom-latch")
	if ok, err := l.TrySetCount(ctx, 2, 10*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- l.Wait(ctx) }()
	for range 2 {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return")
	}
	if err := l.Wait(ctx); err != nil { // absent: open at once
		t.Fatal(err)
	}
	if ok, err := l.TrySetCount(ctx, 1, 10*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := l.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a closed latch: %v", err)
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if err := l.CountDown(done); err == nil {
		t.Fatal("CountDown with a cancelled context succeeded")
	}
	//lint:ignore SA1012 nil context on purpose
	if err := l.CountDown(nil); !errors.Is(err, dlock.ErrInvalidArgument) { //nolint:staticcheck
		t.Fatal(err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP dlock_latch_countdowns_total Count-down latch CountDown calls that Redis applied.
# TYPE dlock_latch_countdowns_total counter
dlock_latch_countdowns_total 3
# HELP dlock_latch_errors_total Count-down latch calls that failed (Redis error, cancelled context, closed client), by op: countdown or wait.
# TYPE dlock_latch_errors_total counter
dlock_latch_errors_total{op="countdown"} 1
dlock_latch_errors_total{op="wait"} 1
# HELP dlock_latch_waits_total Count-down latch Wait calls that returned with the latch open.
# TYPE dlock_latch_waits_total counter
dlock_latch_waits_total 2
`), "dlock_latch_countdowns_total", "dlock_latch_errors_total", "dlock_latch_waits_total"); err != nil {
		t.Fatal(err)
	}
	lint(t, reg)
}
