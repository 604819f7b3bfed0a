package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// keysWithoutTTL lists r's keys that have no TTL.
func keysWithoutTTL(ctx context.Context, rdb *redis.Client) ([]string, error) {
	var bad []string
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		if ttl, err := rdb.PTTL(ctx, iter.Val()).Result(); err == nil && ttl == -1 {
			bad = append(bad, iter.Val())
		}
	}
	return bad, iter.Err()
}

// watchAllTTLs checks every 20ms, until the test ends, that every key of r has
// a TTL.
func watchAllTTLs(t *testing.T, r *testenv.Redis) {
	t.Helper()
	rdb := rdbFor(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			bad, err := keysWithoutTTL(ctx, rdb)
			if len(bad) > 0 {
				t.Errorf("keys without a TTL mid-test: %v", bad)
				return
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("SCAN: %v", err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// waitSemQueued waits until the semaphore's queue has n entries, and returns
// them.
func waitSemQueued(t *testing.T, rdb *redis.Client, name string, n int) []string {
	t.Helper()
	q := keys.Semaphore(name).Queue
	for deadline := time.Now().Add(5 * time.Second); ; {
		if v, _ := rdb.LRange(context.Background(), q, 0, -1).Result(); len(v) == n {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue of %s: %v, want %d entries", name, rdb.LRange(context.Background(), q, 0, -1).Val(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Never more permits held than the size: three Clients of six goroutines
// each take random numbers of permits (fixed leases and watchdog ones,
// waits cancelled at random) for about five seconds; a shared counter adds
// each permit's n after its grant returned and takes it off before its
// release is sent, so it can only undercount. No key is ever without a TTL.
func TestWeightedNeverMoreThanSize(t *testing.T) {
	r := testenvRedis(t)
	watchAllTTLs(t, r)
	ctx := ctxT(t)
	const size = 5
	var held, peak, grants atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(5 * time.Second)
	worker := func(s *Semaphore, who string) {
		defer wg.Done()
		for time.Now().Before(stop) {
			n := 1 + rand.IntN(size)
			if rand.IntN(2) == 0 {
				n = 1 + rand.IntN(2) // mostly small ones, so that large ones queue behind them
			}
			lease := time.Duration(0)
			if rand.IntN(3) == 0 {
				lease = time.Second
			}
			actx, cancel := context.WithTimeout(ctx, time.Duration(20+rand.IntN(300))*time.Millisecond)
			p, err := s.AcquireN(actx, n, time.Second, lease)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrWaitTimeout) {
					continue
				}
				t.Errorf("%s: AcquireN(%d): %v", who, n, err)
				return
			}
			if p.N() != n {
				t.Errorf("%s: N() = %d, want %d", who, p.N(), n)
			}
			now := held.Add(int64(n))
			grants.Add(1)
			for old := peak.Load(); now > old && !peak.CompareAndSwap(old, now); old = peak.Load() {
			}
			if now > size {
				t.Errorf("%d permits held at once, the size is %d", now, size)
			}
			select {
			case <-time.After(time.Duration(rand.IntN(4)) * time.Millisecond):
			case <-p.Done():
			}
			held.Add(-int64(n))
			if err := p.Release(ctx); err != nil && !errors.Is(err, ErrLockLost) {
				t.Errorf("%s: Release: %v", who, err)
				return
			}
		}
	}
	for i := range 3 {
		c := newClient(t, r, WithWatchdogTimeout(time.Second))
		for j := range 6 {
			wg.Add(1)
			go worker(c.Semaphore("sem:weighted", size), fmt.Sprint("c", i, "/", j))
		}
	}
	wg.Wait()
	if grants.Load() < 200 {
		t.Fatalf("only %d grants: the test proves little", grants.Load())
	}
	if peak.Load() < size {
		t.Fatalf("at most %d permits held at once: the test proves little", peak.Load())
	}
	t.Logf("%d grants, at most %d permits held at once", grants.Load(), peak.Load())
}

// No starvation: a waiter for every permit queued behind a stream of
// waiters for one is granted before any of those that came after it, and
// soon (the small ones alone would always keep some permit taken).
func TestWeightedNoStarvation(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	const size = 4
	rdb := rdbFor(t, r)
	type grant struct{ start, end time.Time }
	var mu sync.Mutex
	var smalls []grant
	var wg sync.WaitGroup
	sctx, stop := context.WithCancel(ctx)
	for i := range 2 {
		c := newClient(t, r)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := c.Semaphore("sem:starve", size)
				for sctx.Err() == nil {
					start := time.Now()
					p, err := s.Acquire(sctx, 10*time.Second, 0)
					if err != nil {
						if sctx.Err() == nil {
							t.Errorf("small %d: %v", i, err)
						}
						return
					}
					mu.Lock()
					smalls = append(smalls, grant{start, time.Now()})
					mu.Unlock()
					time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond)
					if err := p.Release(ctx); err != nil {
						t.Errorf("small %d: Release: %v", i, err)
						return
					}
				}
			}()
		}
	}
	t.Cleanup(func() { stop(); wg.Wait() }) // before the Clients close
	big := newClient(t, r).Semaphore("sem:starve", size)
	time.Sleep(200 * time.Millisecond) // the stream runs
	for round := range 3 {
		got := make(chan *Permit, 1)
		go func() {
			p, err := big.AcquireN(ctx, size, 10*time.Second, 0)
			if err != nil {
				t.Error(err)
			}
			got <- p
		}()
		// When the big one is queued, everyone who calls from then on came
		// after it.
		var queued time.Time
		for deadline := time.Now().Add(5 * time.Second); queued.IsZero(); {
			for _, e := range rdb.LRange(ctx, keys.Semaphore("sem:starve").Queue, 0, -1).Val() {
				if strings.HasSuffix(e, fmt.Sprint("#", size)) {
					queued = time.Now()
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the big waiter never queued")
			}
		}
		var p *Permit
		select {
		case p = <-got:
		case <-time.After(3 * time.Second):
			t.Fatalf("round %d: the waiter for %d permits starved", round, size)
		}
		granted := time.Now()
		if p == nil {
			t.FailNow()
		}
		mu.Lock()
		overtaken := 0
		for _, g := range smalls {
			if g.start.After(queued) && g.end.Before(granted) {
				overtaken++
			}
		}
		n := len(smalls)
		mu.Unlock()
		if overtaken > 0 {
			t.Fatalf("round %d: %d waiters for one permit that came after the big one were granted before it", round, overtaken)
		}
		t.Logf("round %d: granted %v after queueing; %d small grants so far", round, granted.Sub(queued), n)
		time.Sleep(5 * time.Millisecond)
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	wg.Wait()
}

// SetPermits growing the size grants, by event, the queued waiters that
// now fit, in arrival order, and only those: the waiters re-check once a
// minute, so nothing but the grant's message can wake them in time.
func TestWeightedSetPermitsWakes(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	admin := newClient(t, r)
	s := admin.Semaphore("sem:grow", 2)
	full, err := s.AcquireN(ctx, 2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		i   int
		p   *Permit
		err error
		at  time.Time
	}
	got := make(chan result, 3)
	for i, n := range []int{2, 1, 1} {
		c := newClient(t, r, withRecheck(time.Minute))
		go func() {
			p, err := c.Semaphore("sem:grow", 2).AcquireN(ctx, n, 20*time.Second, 0)
			got <- result{i, p, err, time.Now()}
		}()
		waitSemQueued(t, rdb, "sem:grow", i+1)
	}
	time.Sleep(20 * time.Millisecond) // each waiter is in its wait
	start := time.Now()
	if err := s.SetPermits(ctx, 5); err != nil { // 3 free: the 2 and the first 1
		t.Fatal(err)
	}
	if s.Permits() != 5 {
		t.Fatalf("Permits after SetPermits(5): %d", s.Permits())
	}
	// The first two fit (2 + 1 of 3 free), in arrival order; the third
	// would fit in place of the first, and must not get it. Both are told
	// by the one script, so either may return first.
	var granted []*Permit
	for range 2 {
		select {
		case g := <-got:
			if g.i > 1 || g.p == nil {
				t.Fatalf("waiter %d (%v, %v) granted, want 0 and 1 (arrival order)", g.i, g.p, g.err)
			}
			d := g.at.Sub(start)
			t.Logf("waiter %d (%d permits) granted %v after SetPermits", g.i, g.p.N(), d)
			if d > 100*time.Millisecond {
				t.Errorf("waiter %d granted %v after SetPermits, want under 100ms", g.i, d)
			}
			granted = append(granted, g.p)
		case <-time.After(2 * time.Second):
			t.Fatalf("only %d waiters granted after SetPermits grew the semaphore, want 2", len(granted))
		}
	}
	select {
	case g := <-got:
		t.Fatalf("waiter %d granted too: %d permits held of 5", g.i, 2+2+1+1)
	case <-time.After(100 * time.Millisecond):
	}
	if n, err := s.Available(ctx); err != nil || n != 0 {
		t.Fatalf("Available: %d %v, want 0", n, err)
	}
	if err := full.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		if g.i != 2 || g.p == nil {
			t.Fatalf("waiter %d: %v", g.i, g.err)
		}
		granted = append(granted, g.p)
	case <-time.After(2 * time.Second):
		t.Fatal("the last waiter was not granted after a release")
	}
	for _, p := range granted {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Shrinking revokes nothing: the holders keep their permits (renewed by
// the watchdog) and new permits wait until those held fall below the new
// size; a queued waiter for more than the new size fails at once.
func TestWeightedShrinkRevokesNothing(t *testing.T) {
	r := testenvRedis(t)
	watchAllTTLs(t, r)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	s := c.Semaphore("sem:shrink", 4)
	a, err := s.AcquireN(ctx, 3, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bigErr := make(chan error, 1)
	go func() {
		_, err := newClient(t, r, withRecheck(time.Minute)).Semaphore("sem:shrink", 4).AcquireN(ctx, 2, 10*time.Second, 0)
		bigErr <- err
	}()
	waitSemQueued(t, rdb, "sem:shrink", 1)
	start := time.Now()
	if err := s.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-bigErr:
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("a waiter for 2 permits after shrinking to 1: %v, want ErrInvalidArgument", err)
		}
		t.Logf("the waiter for 2 was told in %v", time.Since(start))
	case <-time.After(time.Second):
		t.Fatal("a waiter for more than the new size kept waiting")
	}
	time.Sleep(time.Second) // renewals go on
	for _, p := range []*Permit{a, b} {
		select {
		case <-p.Done():
			t.Fatalf("permit of %d lost after shrinking: %v", p.N(), p.Err())
		default:
		}
	}
	if n, err := s.Available(ctx); err != nil || n != 0 {
		t.Fatalf("Available with 4 held of 1: %d %v, want 0", n, err)
	}
	other := c.Semaphore("sem:shrink", 4)
	if _, err := other.Acquire(ctx, 100*time.Millisecond, 0); !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("Acquire with 4 held of 1: %v, want ErrWaitTimeout", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, 100*time.Millisecond, 0); !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("Acquire with 1 held of 1: %v, want ErrWaitTimeout", err)
	}
	got := make(chan *Permit, 1)
	go func() {
		p, _ := other.Acquire(ctx, 5*time.Second, 0)
		got <- p
	}()
	waitSemQueued(t, rdb, "sem:shrink", 1)
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p == nil {
		t.FailNow()
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Available and N: a permit of 3 of 5 leaves 2; its id carries its weight,
// and Locks shows it as one holder of count 3.
func TestWeightedAvailableAndN(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, shared)
	s := c.Semaphore("sem:avail", 5)
	if n, err := s.Available(ctx); err != nil || n != 5 {
		t.Fatalf("Available of a new semaphore: %d %v, want 5", n, err)
	}
	p, err := s.AcquireN(ctx, 3, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.N() != 3 || one.N() != 1 || !strings.HasSuffix(p.ID(), "#3") || strings.Contains(one.ID(), "#") {
		t.Fatalf("N %d, %d; IDs %q, %q", p.N(), one.N(), p.ID(), one.ID())
	}
	if n, err := s.Available(ctx); err != nil || n != 1 {
		t.Fatalf("Available: %d %v, want 1", n, err)
	}
	if _, err := s.AcquireN(ctx, 2, 0, 0); !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("2 of 1 free: %v, want ErrWaitTimeout", err)
	}
	infos, err := c.Locks(ctx, "sem:avail")
	if err != nil || len(infos) != 1 {
		t.Fatalf("Locks: %v %v", infos, err)
	}
	counts := map[string]int64{}
	for _, h := range infos[0].Holders {
		counts[h.Owner] = h.Count
	}
	if infos[0].Permits != 5 || counts[p.ID()] != 3 || counts[one.ID()] != 1 || len(counts) != 2 {
		t.Fatalf("Locks: %+v", infos[0])
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Available(ctx); err != nil || n != 4 {
		t.Fatalf("Available after releasing 3: %d %v, want 4", n, err)
	}
	if err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter for many permits that crashed while first in the queue does not
// stall the ones behind it: once its seen deadline passes (four of its
// re-check intervals after its last attempt) it is dropped.
func TestWeightedCrashedWaiterDropped(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r, withRecheck(100*time.Millisecond))
	s := c.Semaphore("sem:crash", 3)
	p, err := s.AcquireN(ctx, 2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startBlackhole(t, r.Addr())
	doomed := clientVia(t, proxy, withRecheck(100*time.Millisecond), WithCloseTimeout(300*time.Millisecond))
	go func() { _, _ = doomed.Semaphore("sem:crash", 3).AcquireN(ctx, 3, 10*time.Second, 0) }()
	waitSemQueued(t, rdb, "sem:crash", 1)
	proxy.Cut()
	start := time.Now()
	q, err := s.Acquire(ctx, 5*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("granted %v after the first waiter was cut off", took)
	if took > 2*time.Second {
		t.Fatalf("the crashed waiter stalled the queue for %v", took)
	}
	for _, x := range []*Permit{p, q} {
		if err := x.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
