package dlockgocron_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockgocron"
	"github.com/dlock-dev/dlock/internal/testenv"
)

var shared *testenv.Redis

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, "dlockgocron", &shared, nil)) }

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

func newLocker(t *testing.T, c *dlock.Client, opts ...dlockgocron.Option) *dlockgocron.Locker {
	t.Helper()
	l, err := dlockgocron.NewLocker(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// newScheduler starts a gocron scheduler; it is shut down by the returned
// function (idempotent) and at the latest in t.Cleanup.
func newScheduler(t *testing.T, opts ...gocron.SchedulerOption) (gocron.Scheduler, func()) {
	t.Helper()
	s, err := gocron.NewScheduler(opts...)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if err := s.Shutdown(); err != nil {
				t.Errorf("scheduler shutdown: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return s, stop
}

// Three Clients, each with its own gocron scheduler and Locker, run the same
// fast job every 250ms: every fire (the runs grouped by the interval their
// start falls in) runs exactly once across the three, none is skipped
// everywhere, and the job sees a live HoldContext while it runs.
func TestLockerEachFireRunsOnce(t *testing.T) {
	const (
		interval = 250 * time.Millisecond
		runFor   = 3 * time.Second
		job      = "each-fire-once"
	)
	type run struct {
		window   time.Time
		instance int
	}
	var (
		mu   sync.Mutex
		runs []run
	)
	// Fires fall in the middle of their window, so firing jitter between
	// schedulers (well under interval/2) keeps a fire in its window.
	start := time.Now().Truncate(interval).Add(2*interval + interval/2)
	var stops []func()
	lockers := make([]*dlockgocron.Locker, 3)
	for i := range 3 {
		c := newClient(t)
		lockers[i] = newLocker(t, c, dlockgocron.HoldAtLeast(interval/2), dlockgocron.WithPrefix("test:"))
		s, stop := newScheduler(t, gocron.WithDistributedLocker(lockers[i]))
		stops = append(stops, stop)
		l := lockers[i]
		_, err := s.NewJob(gocron.DurationJob(interval), gocron.NewTask(func() {
			now := time.Now()
			if err := l.HoldContext(job).Err(); err != nil {
				t.Errorf("instance %d: the job's hold context is done while it runs: %v", i, context.Cause(l.HoldContext(job)))
			}
			mu.Lock()
			runs = append(runs, run{now.Truncate(interval), i})
			mu.Unlock()
			time.Sleep(10 * time.Millisecond) // a fast job
		}), gocron.WithName(job), gocron.WithStartAt(gocron.WithStartDateTime(start)))
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
	}
	time.Sleep(time.Until(start) + runFor)
	for _, stop := range stops {
		stop()
	}
	for _, l := range lockers {
		_ = l.Close()
	}

	mu.Lock()
	defer mu.Unlock()
	per := map[time.Time][]int{}
	var windows []time.Time
	for _, r := range runs {
		if _, ok := per[r.window]; !ok {
			windows = append(windows, r.window)
		}
		per[r.window] = append(per[r.window], r.instance)
	}
	slices.SortFunc(windows, func(a, b time.Time) int { return a.Compare(b) })
	if min := int(runFor/interval) * 2 / 3; len(windows) < min {
		t.Fatalf("the job ran in %d windows, want at least %d", len(windows), min)
	}
	instances := map[int]bool{}
	for i, w := range windows {
		if got := per[w]; len(got) != 1 {
			t.Errorf("fire of %s ran %d times (instances %v), want once", w.Format("15:04:05.000"), len(got), got)
		}
		instances[per[w][0]] = true
		if i > 0 && w.Sub(windows[i-1]) != interval {
			t.Errorf("no run between %s and %s: fires skipped everywhere",
				windows[i-1].Format("15:04:05.000"), w.Format("15:04:05.000"))
		}
	}
	t.Logf("%d fires, each run once, by instances %v", len(windows), instances)
}

// HoldAtLeast: Unlock right after Lock returns at once, yet no other Client
// (nor the same Locker) can take the lock until HoldAtLeast has passed, and
// another Client can right after.
func TestLockerHoldAtLeast(t *testing.T) {
	const hold = time.Second
	ctx := ctxT(t)
	la := newLocker(t, newClient(t), dlockgocron.HoldAtLeast(hold))
	cb := newClient(t)
	lb := newLocker(t, cb)

	begin := time.Now()
	lk, err := la.Lock(ctx, "hold-at-least")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lb.Lock(ctx, "hold-at-least"); !errors.Is(err, dlockgocron.ErrHeldElsewhere) || !errors.Is(err, dlock.ErrWaitTimeout) {
		t.Fatalf("Lock of a held job on another Client: %v, want ErrHeldElsewhere and ErrWaitTimeout", err)
	}
	u := time.Now()
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if d := time.Since(u); d > 100*time.Millisecond {
		t.Errorf("Unlock blocked %v with time left to HoldAtLeast", d)
	}
	if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock: %v, want ErrNotHeld", err)
	}
	if _, err := la.Lock(ctx, "hold-at-least"); !errors.Is(err, dlockgocron.ErrHeldElsewhere) {
		t.Errorf("Lock through the same Locker during HoldAtLeast: %v, want ErrHeldElsewhere", err)
	}
	m := cb.Mutex(dlockgocron.DefaultPrefix + "hold-at-least")
	var got time.Duration
	for {
		ok, err := m.TryLock(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = time.Since(begin)
			break
		}
		if time.Since(begin) > hold+5*time.Second {
			t.Fatal("the lock was never released after HoldAtLeast")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got < hold {
		t.Errorf("another Client took the lock %v after Lock, before HoldAtLeast (%v)", got, hold)
	}
	if got > hold+750*time.Millisecond {
		t.Errorf("another Client took the lock only %v after Lock, HoldAtLeast is %v", got, hold)
	}
	t.Logf("released %v after Lock (HoldAtLeast %v)", got, hold)
}

// Locker.Close releases at once the locks HoldAtLeast still keeps.
func TestLockerCloseReleasesKeptLocks(t *testing.T) {
	ctx := ctxT(t)
	l := newLocker(t, newClient(t), dlockgocron.HoldAtLeast(time.Minute))
	lk, err := l.Lock(ctx, "close-releases")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	locked, err := newClient(t).Mutex(dlockgocron.DefaultPrefix + "close-releases").IsLocked(ctx)
	if err != nil || !locked {
		t.Fatalf("IsLocked after Unlock within HoldAtLeast: %v, %v; want true", locked, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	locked, err = newClient(t).Mutex(dlockgocron.DefaultPrefix + "close-releases").IsLocked(ctx)
	if err != nil || locked {
		t.Fatalf("IsLocked after Locker.Close: %v, %v; want false", locked, err)
	}
	if _, err := l.Lock(ctx, "close-releases"); !errors.Is(err, dlockgocron.ErrLockerClosed) {
		t.Errorf("Lock after Close: %v, want ErrLockerClosed", err)
	}
}

// A hold taken from under the job (ForceUnlock by another Client) is not
// lost silently: OnLost gets the key and the loss, the job's HoldContext is
// cancelled with it, and Unlock returns it.
func TestLockerLossIsReported(t *testing.T) {
	ctx := ctxT(t)
	type lost struct {
		key string
		err error
	}
	ch := make(chan lost, 1)
	l := newLocker(t, newClient(t, dlock.WithWatchdogTimeout(500*time.Millisecond)),
		dlockgocron.OnLost(func(key string, err error) { ch <- lost{key, err} }))
	lk, err := l.Lock(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	hctx := l.HoldContext("lost")
	if hctx.Err() != nil {
		t.Fatalf("HoldContext of a live hold is done: %v", context.Cause(hctx))
	}
	if ok, err := newClient(t).Mutex(dlockgocron.DefaultPrefix + "lost").ForceUnlock(ctx); err != nil || !ok {
		t.Fatalf("ForceUnlock: %v, %v", ok, err)
	}
	select {
	case got := <-ch:
		if got.key != "lost" || !errors.Is(got.err, dlock.ErrLockLost) || !errors.Is(got.err, dlock.ErrForced) {
			t.Errorf("OnLost(%q, %v), want key lost and an ErrLockLost/ErrForced loss", got.key, got.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnLost not called 5s after the hold was forced away")
	}
	select {
	case <-hctx.Done():
		if !errors.Is(context.Cause(hctx), dlock.ErrLockLost) {
			t.Errorf("HoldContext cause %v, want ErrLockLost", context.Cause(hctx))
		}
	case <-time.After(time.Second):
		t.Fatal("HoldContext not cancelled after the loss")
	}
	if err := lk.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock after the loss: %v, want ErrLockLost", err)
	}
	if err := context.Cause(l.HoldContext("lost")); !errors.Is(err, dlockgocron.ErrNotRunning) {
		t.Errorf("HoldContext after Unlock: cause %v, want ErrNotRunning", err)
	}
}

func TestInvalidArguments(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t)
	for name, f := range map[string]func() error{
		"nil client":       func() error { _, err := dlockgocron.NewLocker(nil); return err },
		"nil option":       func() error { _, err := dlockgocron.NewLocker(c, nil); return err },
		"negative hold":    func() error { _, err := dlockgocron.NewLocker(c, dlockgocron.HoldAtLeast(-time.Second)); return err },
		"nil OnLost":       func() error { _, err := dlockgocron.NewLocker(c, dlockgocron.OnLost(nil)); return err },
		"bad prefix":       func() error { _, err := dlockgocron.NewLocker(c, dlockgocron.WithPrefix("\xff")); return err },
		"elector nil":      func() error { _, err := dlockgocron.NewElector(nil, "e"); return err },
		"elector no name":  func() error { _, err := dlockgocron.NewElector(c, ""); return err },
		"elector nil opt":  func() error { _, err := dlockgocron.NewElector(c, "e", nil); return err },
		"elector no value": func() error { _, err := dlockgocron.NewElector(c, "e", dlockgocron.WithValue("")); return err },
		"empty key":        func() error { _, err := newLocker(t, c).Lock(ctx, ""); return err },
		"bad key":          func() error { _, err := newLocker(t, c).Lock(ctx, "a}b"); return err },
		"IsLeader nil ctx": func() error { var nilCtx context.Context; return (&dlockgocron.Elector{}).IsLeader(nilCtx) },
	} {
		if err := f(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	// A name dlock refuses stops the campaign; IsLeader says why.
	e, err := dlockgocron.NewElector(c, "a}b")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := e.IsLeader(ctx)
		if errors.Is(err, dlockgocron.ErrNotLeader) && errors.Is(err, dlock.ErrInvalidArgument) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("IsLeader of an invalid election: %v, want ErrNotLeader and ErrInvalidArgument", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Three schedulers with an Elector each run a job every 100ms: only one
// instance runs it (and only its IsLeader returns nil); when the leader's
// Client is closed, another instance takes over within the watchdog timeout
// and the old one runs nothing more; closing the new leader's Elector hands
// the leadership to the last instance at once.
func TestElectorOneInstanceRunsJobs(t *testing.T) {
	const (
		interval = 100 * time.Millisecond
		watchdog = 500 * time.Millisecond
	)
	type run struct {
		at       time.Time
		instance int
	}
	var (
		mu   sync.Mutex
		runs []run
	)
	runsSince := func(since time.Time) map[int]int {
		mu.Lock()
		defer mu.Unlock()
		got := map[int]int{}
		for _, r := range runs {
			if !r.at.Before(since) {
				got[r.instance]++
			}
		}
		return got
	}
	// waitRun waits for a run started at or after since by an instance
	// other than not, and returns it.
	waitRun := func(since time.Time, not int, limit time.Duration) (run, bool) {
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			mu.Lock()
			for _, r := range runs {
				if !r.at.Before(since) && r.instance != not {
					mu.Unlock()
					return r, true
				}
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
		return run{}, false
	}
	clients := make([]*dlock.Client, 3)
	electors := make([]*dlockgocron.Elector, 3)
	stops := make([]func(), 3)
	for i := range 3 {
		clients[i] = newClient(t, dlock.WithWatchdogTimeout(watchdog))
		e, err := dlockgocron.NewElector(clients[i], "gocron-elector-test")
		if err != nil {
			t.Fatal(err)
		}
		electors[i] = e
		t.Cleanup(func() { _ = e.Close() })
		s, stop := newScheduler(t, gocron.WithDistributedElector(e))
		stops[i] = stop
		if _, err := s.NewJob(gocron.DurationJob(interval), gocron.NewTask(func() {
			mu.Lock()
			runs = append(runs, run{time.Now(), i})
			mu.Unlock()
		}), gocron.WithName("elected")); err != nil {
			t.Fatal(err)
		}
		s.Start()
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
		for _, e := range electors {
			if err := e.Close(); err != nil {
				t.Errorf("Elector.Close: %v", err)
			}
		}
	}()

	first, ok := waitRun(time.Time{}, -1, 5*time.Second)
	if !ok {
		t.Fatal("no instance ran the job within 5s")
	}
	time.Sleep(time.Second)
	leader := first.instance
	if got := runsSince(time.Time{}); len(got) != 1 || got[leader] < 5 {
		t.Fatalf("runs per instance %v, want only instance %d, at least 5 times", got, leader)
	}
	for i, e := range electors {
		if err := e.IsLeader(context.Background()); (err == nil) != (i == leader) || (err != nil && !errors.Is(err, dlockgocron.ErrNotLeader)) {
			t.Errorf("instance %d IsLeader: %v (leader %d)", i, err, leader)
		}
	}

	// The leader's Client goes away.
	closing := time.Now()
	if err := clients[leader].Close(); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	if err := electors[leader].IsLeader(context.Background()); !errors.Is(err, dlockgocron.ErrNotLeader) {
		t.Errorf("IsLeader of the closed leader: %v, want ErrNotLeader", err)
	}
	next, ok := waitRun(closing, leader, watchdog+interval+2*time.Second)
	if !ok {
		t.Fatal("no other instance ran the job after the leader's Client closed")
	}
	if took := next.at.Sub(closing); took > watchdog+interval+300*time.Millisecond {
		t.Errorf("instance %d took over %v after the leader closed, watchdog timeout %v", next.instance, took, watchdog)
	}
	time.Sleep(time.Second)
	got := runsSince(closed.Add(20 * time.Millisecond))
	if len(got) != 1 || got[next.instance] < 5 {
		t.Fatalf("runs per instance after the leader closed: %v, want only instance %d, at least 5 times", got, next.instance)
	}

	// The new leader resigns by closing its Elector: the last instance leads
	// at once.
	last := 3 - leader - next.instance
	resigning := time.Now()
	if err := electors[next.instance].Close(); err != nil {
		t.Fatalf("Elector.Close of the leader: %v", err)
	}
	for electors[last].IsLeader(context.Background()) != nil {
		if time.Since(resigning) > watchdog {
			t.Fatalf("instance %d does not lead %v after the leader resigned", last, watchdog)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("leader %d, then %d (%v after Close), then %d (%v after Resign)",
		leader, next.instance, next.at.Sub(closing), last, time.Since(resigning))
}

// gocron's Shutdown gives up on a job still running after StopTimeout, and
// the documented order then closes the Locker: Close returns, leaving the
// running job's hold to its Unlock. It waited for that job, for as long as
// it ran.
func TestLockerCloseDoesNotWaitForRunningJob(t *testing.T) {
	c := newClient(t)
	l, err := dlockgocron.NewLocker(c)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l), gocron.WithStopTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}, 1), make(chan struct{})
	if _, err := s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(func() {
		started <- struct{}{}
		<-release
	}), gocron.WithName("stuck"), gocron.WithStartAt(gocron.WithStartImmediately())); err != nil {
		t.Fatal(err)
	}
	s.Start()
	<-started
	if err := s.Shutdown(); !errors.Is(err, gocron.ErrStopJobsTimedOut) {
		t.Fatalf("Shutdown: %v, want it to give up on the running job", err)
	}
	closed := make(chan struct{})
	go func() { _ = l.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Error("Locker.Close waited for a job the scheduler's shutdown gave up on")
	}
	close(release)
	<-closed
}

// With an Elector, gocron starts jobs on IsLeader alone and cancels none:
// when the leader is cut off from Redis, another instance is elected and
// runs the same job. A job that watches LeaderContext stops no later than
// the leadership could have expired in Redis, so the runs never overlap.
func TestElectorLeaderContextEndsTheRunBeforeAnotherLeads(t *testing.T) {
	const watchdog = 300 * time.Millisecond
	p := testenv.NewFaultProxy(t, shared.Addr())
	rdbA := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdbA.Close() })
	cA, err := dlock.New(rdbA, dlock.WithWatchdogTimeout(watchdog), dlock.WithCleanupTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cA.Close() })
	cB := newClient(t, dlock.WithWatchdogTimeout(watchdog))
	var running, most atomic.Int32
	var starts [2]atomic.Int32
	start := func(i int, c *dlock.Client) {
		e, err := dlockgocron.NewElector(c, "leader-context")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		task := func() {
			lead := e.LeaderContext()
			starts[i].Add(1)
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			select {
			case <-time.After(2 * time.Second):
			case <-lead.Done():
			}
			running.Add(-1)
		}
		s, stop := newScheduler(t, gocron.WithDistributedElector(e), gocron.WithStopTimeout(5*time.Second))
		if _, err := s.NewJob(gocron.DurationJob(100*time.Millisecond), gocron.NewTask(task),
			gocron.WithName("report"), gocron.WithSingletonMode(gocron.LimitModeReschedule)); err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(stop)
	}
	start(0, cA)
	waitUntil(t, "A's first run", func() bool { return starts[0].Load() > 0 })
	start(1, cB)
	p.Blackhole()
	waitUntil(t, "B's first run", func() bool { return starts[1].Load() > 0 })
	if most.Load() > 1 {
		t.Errorf("the job ran on A and B at once after A's leadership was lost")
	}
}

// waitUntil polls cond until it holds, for at most 30s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
