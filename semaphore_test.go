package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lockcheck"
)

// Never more than n holders: three Clients of four goroutines each on a
// semaphore of three permits, with waits cancelled at random, fixed leases
// and watchdog permits, and a fourth Client cut off from Redis midway while
// its goroutines hold permits (their holds end, for the checker, when they
// are told of the loss; their permits come back by expiry).
func TestSemaphoreNeverMoreThanN(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	const n = 3
	const wd = 500 * time.Millisecond
	var hist lockcheck.History
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	worker := func(c *Client, name string, hold time.Duration, crashed <-chan struct{}) {
		defer wg.Done()
		s := c.Semaphore("sem:limit", n)
		for time.Now().Before(stop) {
			select {
			case <-crashed:
				return
			default:
			}
			actx, cancel := context.WithTimeout(ctx, time.Duration(5+rand.IntN(100))*time.Millisecond)
			lease := time.Duration(0)
			if rand.IntN(3) == 0 {
				lease = time.Second
			}
			p, err := s.Acquire(actx, time.Second, lease)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrWaitTimeout) {
					continue
				}
				select {
				case <-crashed:
					return
				default:
				}
				t.Errorf("%s: Acquire: %v", name, err)
				return
			}
			start := time.Now()
			select {
			case <-time.After(hold + time.Duration(rand.IntN(3))*time.Millisecond):
			case <-p.Done():
			}
			hist.Add(lockcheck.Hold{Owner: name + "/" + p.ID(), Start: start, End: time.Now()})
			select {
			case <-crashed:
				// Cut off: the release cannot get through; it goes on in
				// the background until Close.
				rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
				_ = p.Release(rctx)
				rcancel()
				return
			default:
			}
			// A permit lost on a loaded box (its End above is when it was
			// told) is no failure of the limit; anything else is.
			if err := p.Release(ctx); err != nil && !errors.Is(err, ErrLockLost) {
				t.Errorf("%s: Release: %v", name, err)
				return
			}
		}
	}
	never := make(chan struct{})
	for i := range 3 {
		c := newClient(t, r, WithWatchdogTimeout(wd))
		for j := range 4 {
			wg.Add(1)
			go worker(c, fmt.Sprint("c", i, "/", j), time.Millisecond, never)
		}
	}
	proxy := startBlackhole(t, r.Addr())
	doomed := clientVia(t, proxy, WithWatchdogTimeout(wd), WithCloseTimeout(300*time.Millisecond))
	crashed := make(chan struct{})
	for j := range 2 {
		wg.Add(1)
		go worker(doomed, fmt.Sprint("cut/", j), 300*time.Millisecond, crashed)
	}
	time.Sleep(700 * time.Millisecond)
	close(crashed)
	proxy.Cut()
	wg.Wait()
	if hist.Len() < 50 {
		t.Fatalf("only %d holds: the test proves little", hist.Len())
	}
	if err := hist.CheckLimit(n); err != nil {
		t.Fatal(err)
	}
	if hist.CheckLimit(n-1) == nil {
		t.Fatal("never n holders at once: the test proves little")
	}
	t.Logf("%d holds", hist.Len())
}

// A holder cut off from Redis is told its permit ended before the waiter
// on another Client gets it, and the waiter gets it within the watchdog
// timeout (watchdog permits) or the lease (fixed ones).
func TestSemaphoreCutOffHolderPermitReturns(t *testing.T) {
	for _, lease := range []time.Duration{0, 400 * time.Millisecond} {
		t.Run(fmt.Sprint("lease=", lease), func(t *testing.T) {
			r := testenvRedis(t)
			ctx := ctxT(t)
			const wd = 500 * time.Millisecond
			proxy := startBlackhole(t, r.Addr())
			holder := clientVia(t, proxy, WithWatchdogTimeout(wd), WithCloseTimeout(300*time.Millisecond))
			waiter := newClient(t, r, WithWatchdogTimeout(wd))
			p, err := holder.Semaphore("sem:cut", 1).Acquire(ctx, 0, lease)
			if err != nil {
				t.Fatal(err)
			}
			cut := time.Now()
			proxy.Cut()
			got := make(chan time.Time, 1)
			go func() {
				q, err := waiter.Semaphore("sem:cut", 1).Acquire(ctx, 10*time.Second, 0)
				if err != nil {
					t.Error(err)
					got <- time.Time{}
					return
				}
				got <- time.Now()
				_ = q.Release(ctx)
			}()
			<-p.Done()
			told := time.Now()
			want := ErrUnconfirmed
			if lease > 0 {
				want = ErrLeaseEnded
			}
			if err := p.Err(); !errors.Is(err, ErrLockLost) || !errors.Is(err, want) {
				t.Fatalf("Err = %v, want %v", err, want)
			}
			var took time.Time
			select {
			case took = <-got:
			case <-time.After(wd + lease + 3*time.Second):
				t.Fatal("the permit never came back")
			}
			if took.Before(told) {
				t.Fatalf("the waiter got the permit %v before the holder was told", told.Sub(took))
			}
			t.Logf("cut at 0; holder told at %v; waiter granted at %v", told.Sub(cut), took.Sub(cut))
		})
	}
}

// A release wakes one waiter: five Clients wait for the one permit; each
// release gives it straight to the next in line (FIFO), telling only that
// waiter, whose pop takes it (no claim), and nobody else sends anything to
// Redis.
func TestSemaphoreReleaseWakesOne(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	holder := newClient(t, r)
	warm, err := holder.Semaphore("sem:one", 1).Acquire(ctx, 0, 0) // loads the scripts
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := holder.Semaphore("sem:one", 1).Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		i int
		p *Permit
	}
	grants := make(chan grant, 5)
	rdb := rdbFor(t, r)
	q := keys.Semaphore("sem:one").Queue
	for i := range 5 {
		c := newClient(t, r)
		go func() {
			p, err := c.Semaphore("sem:one", 1).Acquire(ctx, 20*time.Second, 0)
			if err != nil {
				t.Error(err)
				return
			}
			grants <- grant{i, p}
		}()
		// Queued in order.
		for deadline := time.Now().Add(5 * time.Second); ; {
			if l, _ := rdb.LLen(ctx, q).Result(); l == int64(i+1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("waiter not queued")
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	prev := first
	for want := range 5 {
		resetCounts(t, ctx, r)
		if err := prev.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var g grant
		select {
		case g = <-grants:
		case <-time.After(2 * time.Second): // re-checks come every 3s
			t.Fatal("no waiter got the released permit at once")
		}
		if g.i != want {
			t.Fatalf("waiter %d got the permit, want %d (arrival order)", g.i, want)
		}
		time.Sleep(50 * time.Millisecond) // anyone else woken would try now
		stats := dataCommands(t, r)
		if stats["evalsha"] != 1 || stats["eval"] != 0 || stats["rpush"] != 1 {
			t.Fatalf("commands per hand-off %v: want the release script alone, putting the permit in the waiter's box", stats)
		}
		select {
		case g2 := <-grants:
			t.Fatalf("waiter %d got a permit too", g2.i)
		default:
		}
		prev = g.p
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The scripts are safe to resend: a resent acquire does not take a second
// permit, a resent release does not free another holder's.
func TestSemaphoreIdempotentScripts(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	s := c.Semaphore("sem:idem", 2)
	rdb := rdbFor(t, shared)
	acquire := func(id string) []int64 {
		t.Helper()
		v, err := rdb.Eval(ctx, semLua("sem_acquire.lua"), semKeys(s), id, 2, 30000, "", 12000, 2000).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	release := func(id string) int64 {
		t.Helper()
		v, err := rdb.Eval(ctx, semLua("sem_release.lua"), semKeys(s), id, 2000, s.p.Keys().Free).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	if r := acquire("x:1"); r[0] != 1 {
		t.Fatalf("acquire: %v", r)
	}
	if r := acquire("x:1"); r[0] != 1 { // resent
		t.Fatalf("resent acquire: %v", r)
	}
	if n := rdb.ZCard(ctx, s.p.Keys().Permits).Val(); n != 1 {
		t.Fatalf("%d permits taken after a resent acquire, want 1", n)
	}
	if r := acquire("y:1"); r[0] != 1 {
		t.Fatalf("second holder: %v", r)
	}
	if r := acquire("z:1"); r[0] != 0 {
		t.Fatalf("third holder of two permits: %v", r)
	}
	if release("x:1") != 1 || release("x:1") != 0 { // resent
		t.Fatal("release, resent release")
	}
	if n := rdb.ZCard(ctx, s.p.Keys().Permits).Val(); n != 1 {
		t.Fatalf("%d permits held after a resent release, want 1 (y's)", n)
	}
	// A queue entry is made once however often the attempt is resent.
	entry := keys.QueueEntry(7, 30000, "w:1")
	for range 2 {
		if r, err := rdb.Eval(ctx, semLua("sem_acquire.lua"), semKeys(s), "w:1", 2, 30000, entry, 12000, 2000).Int64Slice(); err != nil || r[0] != 1 {
			t.Fatalf("acquire with a free permit: %v %v", r, err)
		}
	}
	if release("y:1") != 1 || release("w:1") != 1 {
		t.Fatal("cleanup")
	}
	if n := rdb.Exists(ctx, s.p.Keys().Permits, s.p.Keys().Queue, s.p.Keys().Seen).Val(); n != 0 {
		t.Fatalf("%d keys left after the last release", n)
	}
	// The size stays, with a TTL, until it runs out.
	if ttl := rdb.PTTL(ctx, s.p.Keys().Size).Val(); ttl <= 0 {
		t.Fatalf("the size's TTL after the last release: %v", ttl)
	}
}

// Bad input is refused with ErrInvalidArgument before any network call (the
// client points at a port nobody listens on).
func TestSemaphoreBadInput(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer dead.Close()
	c, err := New(dead)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	for _, tc := range []struct {
		name          string
		n, k          int
		lease         time.Duration
		nilCtx        bool
		wantErrorText string
	}{
		{"sem:bad", 0, 1, 0, false, "zero permits"},
		{"sem:bad", -1, 1, 0, false, "negative permits"},
		{"", 1, 1, 0, false, "empty name"},
		{"a}b", 1, 1, 0, false, "bad name"},
		{"sem:bad", 1, 1, time.Microsecond, false, "sub-millisecond lease"},
		{"sem:bad", 1, 1, 0, true, "nil ctx"},
		{"sem:bad", 3, 0, 0, false, "AcquireN(0)"},
		{"sem:bad", 3, -2, 0, false, "AcquireN(-2)"},
		{"sem:bad", 3, 4, 0, false, "AcquireN above the size"},
	} {
		actx := ctx
		if tc.nilCtx {
			actx = nil
		}
		start := time.Now()
		if _, err := c.Semaphore(tc.name, tc.n).AcquireN(actx, tc.k, time.Second, tc.lease); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", tc.wantErrorText, err)
		}
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Errorf("%s: took %v: not refused at once", tc.wantErrorText, d)
		}
	}
	s := c.Semaphore("sem:bad", 3)
	for _, n := range []int{0, -1} {
		if err := s.SetPermits(ctx, n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("SetPermits(%d): %v, want ErrInvalidArgument", n, err)
		}
	}
	var nilCtx context.Context
	if err := s.SetPermits(nilCtx, 2); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("SetPermits with a nil ctx: %v", err)
	}
	if _, err := s.Available(nilCtx); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Available with a nil ctx: %v", err)
	}
	if _, err := c.Semaphore("a}b", 3).Available(ctx); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Available of a bad name: %v", err)
	}
	if s.Permits() != 3 {
		t.Errorf("Permits after refused SetPermits: %d", s.Permits())
	}
}

// The size is set by the first Acquire; a handle made with another number
// then uses it, and only SetPermits changes it.
func TestSemaphoreSizeRule(t *testing.T) {
	ctx := ctxT(t)
	live := newClient(t, shared)
	p, err := live.Semaphore("sem:size", 2).Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	other := live.Semaphore("sem:size", 3)
	if n, err := other.Available(ctx); err != nil || n != 1 {
		t.Fatalf("Available through a handle of 3: %d %v, want 1 (the size is 2)", n, err)
	}
	q, err := other.Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, 0, 0); !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("a third permit of two: %v, want ErrWaitTimeout", err)
	}
	if _, err := other.AcquireN(ctx, 3, time.Second, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("3 permits of a semaphore of 2: %v, want ErrInvalidArgument", err)
	}
	for _, x := range []*Permit{p, q} {
		if err := x.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Idle, the size stays.
	if n, err := other.Available(ctx); err != nil || n != 2 {
		t.Fatalf("Available when idle: %d %v, want 2", n, err)
	}
	if err := p.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
}

// A waiter that gives up leaves the queue, and the permit released after
// goes to the next waiter, not to the one that left. Every key has a TTL.
func TestSemaphoreCancelledWaiterLeaves(t *testing.T) {
	ctx := ctxT(t)
	a, b, c := newClient(t, shared), newClient(t, shared), newClient(t, shared)
	p, err := a.Semaphore("sem:cancel", 1).Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	rdb := rdbFor(t, shared)
	ks := keys.Semaphore("sem:cancel")
	bctx, bcancel := context.WithCancel(ctx)
	bdone := make(chan error, 1)
	go func() { _, err := b.Semaphore("sem:cancel", 1).Acquire(bctx, 10*time.Second, 0); bdone <- err }()
	waitLen := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); rdb.LLen(ctx, ks.Queue).Val() != n; {
			if time.Now().After(deadline) {
				t.Fatalf("queue length %d, want %d", rdb.LLen(ctx, ks.Queue).Val(), n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitLen(1)
	cdone := make(chan *Permit, 1)
	go func() {
		q, err := c.Semaphore("sem:cancel", 1).Acquire(ctx, 10*time.Second, 300*time.Millisecond)
		if err != nil {
			t.Error(err)
		}
		cdone <- q
	}()
	waitLen(2)
	for _, k := range []string{ks.Permits, ks.Size, ks.Queue} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s has TTL %v", k, ttl)
		}
	}
	bcancel()
	if err := <-bdone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	waitLen(1)
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case q := <-cdone:
		if q == nil {
			t.Fatal("no permit")
		}
		<-q.Done() // the fixed lease runs out
		if !errors.Is(q.Err(), ErrLeaseEnded) {
			t.Fatalf("Err after the lease %v", q.Err())
		}
		if err := q.Release(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Release after the lease: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the next waiter did not get the permit")
	}
}

// Close tells holders (ErrClosed) and gives their permits back.
func TestSemaphoreClose(t *testing.T) {
	ctx := ctxT(t)
	c, err := New(rdbFor(t, shared))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Semaphore("sem:close", 1).Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if !errors.Is(p.Err(), ErrClosed) || !errors.Is(p.Err(), ErrLockLost) {
		t.Fatalf("Err after Close %v", p.Err())
	}
	if n := rdbFor(t, shared).ZCard(ctx, keys.Semaphore("sem:close").Permits).Val(); n != 0 {
		t.Fatalf("%d permits held after Close", n)
	}
	if _, err := c.Semaphore("sem:close", 1).Acquire(ctx, 0, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
}
