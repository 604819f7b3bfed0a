package dlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// A final Unlock with another goroutine of the Client waiting for the same
// lock passes the hold in its own script: the waiter sends nothing, holds
// with its own field, a full TTL and a larger token, and Redis says so.
func TestPassWithinProcess(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	const name = "pass30:basic"
	m := c.Mutex(name)
	actx, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockersAtGate(t, ctx, c, m, 1)
	before := commands(t, r)
	if err := m.Unlock(actx); err != nil {
		t.Fatal(err)
	}
	bctx := <-got
	if bctx == nil {
		t.FailNow()
	}
	after := commands(t, r)
	if n := after["evalsha"] - before["evalsha"]; n != 1 {
		t.Errorf("%d scripts ran for the hand-over, want 1 (the pass; the waiter sends nothing)", n)
	}
	if a, b := TokenFrom(actx), TokenFrom(bctx); b <= a {
		t.Errorf("the passed hold's token %d is not above the first's %d", b, a)
	}
	fields, err := rdb.HGetAll(ctx, name).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) != 1 || fields[holderField(m)] != "1" {
		t.Errorf("the lock hash is %v, want only the new holder's field %q", fields, holderField(m))
	}
	if ttl := rdb.PTTL(ctx, name).Val(); ttl < 20*time.Second {
		t.Errorf("the passed hold's TTL is %v, want the watchdog's 30s", ttl)
	}
	if err := m.Unlock(bctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, name).Val(); n != 0 {
		t.Error("the lock outlived its last Unlock")
	}
}

// Goroutines of two Clients, several per Client, take turns on one lock:
// passes inside each Client and hand-offs between them never let two in,
// every holder is the holder in Redis, and tokens only grow.
func TestPassKeepsExclusionAndFencing(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	ctx := ctxT(t)
	const name = "pass30:turns"
	var (
		mu     sync.Mutex
		inside int
		last   uint64
		grants atomic.Int64
	)
	var wg sync.WaitGroup
	for range 2 {
		c := newClient(t, r)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := c.Mutex(name)
				for range 40 {
					hctx, err := m.LockContext(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					inside++
					tok := TokenFrom(hctx)
					if inside != 1 || tok <= last {
						t.Errorf("%d inside, token %d after %d", inside, tok, last)
					}
					last = tok
					mu.Unlock()
					if ok, err := rdb.HExists(ctx, name, holderField(m)).Result(); !ok || err != nil {
						t.Errorf("the holder's field %q is not in Redis: %v", holderField(m), err)
					}
					grants.Add(1)
					mu.Lock()
					inside--
					mu.Unlock()
					if err := m.Unlock(hctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if n := grants.Load(); n != 240 {
		t.Errorf("%d grants, want 240", n)
	}
	if n := rdb.Exists(ctx, name).Val(); n != 0 {
		t.Error("the lock outlived its last Unlock")
	}
}

// A FairMutex passes only while no other process queues: a waiter of
// another Client that queued first goes before a goroutine of the
// releaser's own Client.
func TestFairPassKeepsCrossProcessOrder(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	ctx := ctxT(t)
	const name = "pass30:fair"
	c1, c2 := newClient(t, r), newClient(t, r)
	m := c1.FairMutex(name)
	actx, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	remote := make(chan context.Context, 1)
	go func() {
		rctx, err := c2.FairMutex(name).LockContext(ctx)
		if err != nil {
			t.Error(err)
		}
		order <- "remote"
		remote <- rctx
	}()
	queue := keys.Companion("dlock:queue", name)
	waitFor(t, "the other Client queued", func() bool { return rdb.LLen(ctx, queue).Val() == 1 })
	local := make(chan context.Context, 1)
	go func() {
		lctx, err := c1.FairMutex(name).LockContext(ctx)
		if err != nil {
			t.Error(err)
		}
		order <- "local"
		local <- lctx
	}()
	waitFor(t, "the local goroutine at the gate", func() bool { return gateWaiters(&m.Mutex) == 1 })
	if err := m.Unlock(actx); err != nil {
		t.Fatal(err)
	}
	if first := <-order; first != "remote" {
		t.Fatalf("%s got the fair lock first, want the waiter that queued first", first)
	}
	if err := c2.FairMutex(name).Unlock(<-remote); err != nil {
		t.Fatal(err)
	}
	<-order
	if err := m.Unlock(<-local); err != nil {
		t.Fatal(err)
	}
}

// A Mutex passes at most a bounded number of times in a row: a waiter of
// another Client gets the lock while the goroutines of one Client keep
// taking it from one another, within passBudget of their grants.
func TestPassLetsOtherProcessesIn(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	ctx := ctxT(t)
	const name = "pass30:budget"
	queue := keys.Companion("dlock:queue", name)
	c1, c2 := newClient(t, r), newClient(t, r)
	stop := make(chan struct{})
	var whileQueued, most atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c1.Mutex(name)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				// Grants made while the other Client's waiter is queued
				// (the holder is the only one who looks: no race).
				if rdb.LLen(ctx, queue).Val() > 0 {
					if n := whileQueued.Add(1); n > most.Load() {
						most.Store(n)
					}
				} else {
					whileQueued.Store(0)
				}
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	waitFor(t, "the Client's goroutines taking turns", func() bool { return rdb.Exists(ctx, name).Val() == 1 })
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		err := c2.Mutex(name).Lock(wctx)
		if err == nil {
			err = c2.Mutex(name).Unlock(wctx)
		}
		got <- err
	}()
	err := <-got
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the other Client's waiter: %v", err)
	}
	// Once it is queued, at most passBudget passes follow the grant in
	// progress, and the next release hands it the lock.
	t.Logf("at most %d grants inside one Client in a row while the other's waiter was queued", most.Load())
	if n := most.Load(); n > 16+1 {
		t.Errorf("%d grants inside one Client in a row while the other's waiter was queued", n)
	}
}

// A waiter whose ctx ends while a pass to it is in flight returns at once,
// not when the pass's reply comes; the hold passed to it is given back, and
// the lock does not wait for its TTL.
func TestPassToWaiterThatLeft(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	proxy := testenv.NewFaultProxy(t, r.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = prdb.Close() })
	c := newClientOn(t, prdb)
	ctx := ctxT(t)
	const name = "pass30:left"
	m := c.Mutex(name)
	actx, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	bDone := make(chan error, 1)
	go func() { bDone <- c.Mutex(name).Lock(bctx) }()
	waitFor(t, "the second goroutine at the gate", func() bool { return gateWaiters(m) == 1 })
	proxy.SetLatency(0, time.Second)
	aDone := make(chan error, 1)
	go func() { aDone <- m.Unlock(actx) }()
	waitFor(t, "the pass sent", func() bool { return gateWaiters(m) == 0 })
	cancelB()
	select {
	case err := <-bDone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the waiter that left: %v, want context.Canceled", err)
		}
	case <-aDone:
		t.Fatal("the waiter that left was kept until the pass's reply")
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(0, 0)
	// The hold passed to the waiter that left is given back: the next
	// caller gets the lock without waiting out the watchdog's 30 s.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hctx, err := c.Mutex(name).LockContext(cctx)
	if err != nil {
		t.Fatalf("the lock after a pass to a waiter that left: %v", err)
	}
	if fields := rdb.HGetAll(ctx, name).Val(); len(fields) != 1 {
		t.Errorf("the lock hash is %v, want the new holder alone", fields)
	}
	if err := c.Mutex(name).Unlock(hctx); err != nil {
		t.Fatal(err)
	}
}

// After a pass in Redis, which takes spare tokens, the next passes inside
// the Client send one HEXISTS each and no script: the Redis hold goes on as
// it is (its field and TTL), each holder with a larger token than the
// last, and the last Unlock releases it.
func TestPassInMemory(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	const name = "pass30:memory"
	m := c.Mutex(name)
	first, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 4
	held := lockersAtGate(t, ctx, c, m, waiters)
	last := TokenFrom(first)
	before := commands(t, r)
	if err := m.Unlock(first); err != nil {
		t.Fatal(err)
	}
	var field string
	for i := range waiters {
		hctx := <-held
		if hctx == nil {
			t.FailNow()
		}
		after := commands(t, r)
		scripts, checks := int64(1), int64(0) // the pass in Redis
		if i > 0 {
			scripts, checks = 0, 1 // a pass in memory: one HEXISTS
		}
		if n, m := after["evalsha"]-before["evalsha"], after["hexists"]-before["hexists"]; n != scripts || m != checks {
			t.Errorf("hand-over %d: %d scripts and %d HEXISTS, want %d and %d", i+1, n, m, scripts, checks)
		}
		before = after
		if tok := TokenFrom(hctx); tok <= last {
			t.Errorf("hand-over %d: token %d after %d", i+1, tok, last)
		} else {
			last = tok
		}
		if i == 0 {
			field = holderField(m)
		} else if f := holderField(m); f != field {
			t.Errorf("hand-over %d: the hold's field changed from %q to %q without a script", i+1, field, f)
		}
		if fields := rdb.HGetAll(ctx, name).Val(); len(fields) != 1 || fields[field] != "1" {
			t.Errorf("hand-over %d: the lock hash is %v, want %q alone", i+1, fields, field)
		}
		if err := m.Unlock(hctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.Exists(ctx, name).Val(); n != 0 {
		t.Error("the lock outlived its last Unlock")
	}
	// A later holder elsewhere gets a token above every one handed out.
	other := newClient(t, r).Mutex(name)
	octx, err := other.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok := TokenFrom(octx); tok <= last {
		t.Errorf("another Client's token %d is not above the last passed %d", tok, last)
	}
	if err := other.Unlock(octx); err != nil {
		t.Fatal(err)
	}
}

// A pass in memory hands the hold on at once and asks Redis whether it is
// still there (HEXISTS) as it does: a holder whose hold Redis lost (here a
// neighbour deleted the key, so nobody was told) learns it from its
// Unlock, as from a release, and the goroutine it handed the hold to is
// told too, or, when the answer came before it began, takes the lock in
// Redis itself. It never goes on believing in a hold that is gone.
func TestPassInMemoryChecksTheHold(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	const name = "pass30:lost"
	m := c.Mutex(name)
	b, held := passedInRedis(t, ctx, c, m, 2)
	field := holderField(m)
	if err := rdb.Del(ctx, name).Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(b); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock of a hold Redis no longer had: %v, want its loss", err)
	}
	cctx := <-held
	if cctx == nil {
		t.FailNow()
	}
	f := holderField(m)
	switch {
	case f == field:
		// Handed on before the check's answer: told of the loss by now
		// (the answer tells the heir before the releaser's Unlock returns,
		// or the heir finds it answered as it begins).
		if cctx.Err() == nil {
			t.Fatal("the next holder believes in the passed hold Redis lost")
		}
		if err := m.Unlock(cctx); !errors.Is(err, ErrLockLost) {
			t.Errorf("the next holder's Unlock: %v, want the loss", err)
		}
	case !rdb.HExists(ctx, name, f).Val():
		t.Errorf("the next holder's field %q (the lost hold's %q) is not in Redis", f, field)
	default:
		if err := m.Unlock(cctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.Exists(ctx, name).Val(); n != 0 {
		t.Error("the lock outlived its last Unlock")
	}
}

// The next holder of a pass in memory has the lock before Redis answers
// the pass's check (here every reply is cut): the hand-over is a goroutine
// switch, not a round trip. Its own release waits for that answer, so that
// it cannot remove the field before the check reads it (the releaser would
// then be told of a loss that was a release): with its ctx ending first,
// its Unlock goes on in the background and Redis still has the hold; once
// replies flow again, the check fails or answers and the release follows.
func TestPassInMemoryHandsOverBeforeTheCheck(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	c, proxy := clientBehindBlackhole(t, r)
	ctx := ctxT(t)
	const name = "pass30:early"
	m := c.Mutex(name)
	bctx, held := passedInRedis(t, ctx, c, m, 2)
	field := holderField(m)
	proxy.CutReplies()
	unlocked := make(chan error, 1)
	go func() {
		uctx, cancel := context.WithTimeout(bctx, 500*time.Millisecond)
		defer cancel()
		unlocked <- m.Unlock(uctx)
	}()
	var cctx context.Context
	select {
	case cctx = <-held:
	case err := <-unlocked:
		t.Fatalf("the releaser's Unlock returned (%v) before the next holder had the lock", err)
	}
	if cctx == nil {
		t.FailNow()
	}
	if f := holderField(m); f != field {
		t.Fatalf("the next holder's field is %q, want the passed hold's %q", f, field)
	}
	if tb, tc := TokenFrom(bctx), TokenFrom(cctx); tc <= tb {
		t.Errorf("the next holder's token %d is not above %d", tc, tb)
	}
	rctx, cancel := context.WithTimeout(cctx, 300*time.Millisecond)
	defer cancel()
	if err := m.Unlock(rctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the next holder's Unlock while the check is unanswered: %v, want its ctx's deadline", err)
	}
	if !rdb.HExists(ctx, name, field).Val() {
		t.Fatal("the next holder's release ran before the pass's check was answered")
	}
	<-unlocked
	proxy.Heal()
	waitFor(t, "the release after the check's answer", func() bool { return rdb.Exists(ctx, name).Val() == 0 })
}

// heirKey marks the contexts the heirs below lock with.
type heirKey struct{}

// An Unlock whose ctx carries no hold releases the handle's current hold
// (Mutex.Unlock), and a hold passed in memory is its heir's alone from the
// hand-over on, though the releaser waits for the pass's check (its reply
// cut here): the heir's Unlock with another ctx than its Lock's releases
// it, and once replies flow the lock is free. (Found by a review: the
// releaser's lease still counted as the handle's, the Unlock found two and
// answered ErrAmbiguous, and the hold stayed, renewed, keeping every other
// goroutine of the Client out.)
func TestPassInMemoryHeirUnlocksWithoutItsHoldsContext(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	c, proxy := clientBehindBlackhole(t, r)
	ctx := ctxT(t)
	const name = "pass30:heir-current"
	m := c.Mutex(name)
	bctx, _ := passedInRedis(t, ctx, c, m, 1)
	locked := make(chan error, 1)
	go func() { locked <- c.Mutex(name).Lock(context.WithValue(ctx, heirKey{}, "c")) }()
	waitFor(t, "the heir at the gate", func() bool { return gateWaiters(m) == 1 })
	proxy.CutReplies()
	go func() {
		uctx, cancel := context.WithTimeout(bctx, 500*time.Millisecond)
		defer cancel()
		_ = m.Unlock(uctx)
	}()
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	uctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := m.Unlock(uctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the heir's Unlock with a ctx carrying no hold: %v, want nil or its ctx's deadline (the release goes on)", err)
	}
	proxy.Heal()
	waitFor(t, "the lock free after its only holder's Unlock", func() bool { return rdb.Exists(ctx, name).Val() == 0 })
}

// The same on a plain connection, as code writes it (Lock with a request's
// ctx, Unlock with another): goroutines of one Client pass the hold in
// memory, an heir often unlocking while its releaser's check is in flight,
// and every Unlock releases.
func TestPassInMemoryUnlocksWithoutHoldContexts(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	const workers, rounds = 4, 50
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex("pass30:unlock-current")
			own := context.WithValue(ctx, heirKey{}, w)
			for range rounds {
				if err := m.Lock(own); err != nil {
					t.Error(err)
					return
				}
				if err := m.Unlock(context.Background()); err != nil {
					if failed.Add(1) <= 3 {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d Unlocks failed", n, workers*rounds)
	}
}

// clientBehindBlackhole returns a Client of r whose every connection goes
// through a blackhole proxy (its replies can be cut), with a read timeout
// of 2s, so that a call whose reply was cut fails in time.
func clientBehindBlackhole(t *testing.T, r *testenv.Redis) (*Client, *blackhole) {
	t.Helper()
	proxy := startBlackhole(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{
		Addr:                     proxy.Addr(),
		ReadTimeout:              2 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClientOn(t, rdb)
	t.Cleanup(proxy.Heal) // before Close
	return c, proxy
}

// passedInRedis locks m, starts n goroutines that lock its name through c
// (lockersAtGate) and unlocks: a pass in Redis, with spare tokens, to the
// first. It returns that holder's context and the channel on which the
// other goroutines' holds come.
func passedInRedis(t *testing.T, ctx context.Context, c *Client, m *Mutex, n int) (context.Context, <-chan context.Context) {
	t.Helper()
	a, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := lockersAtGate(t, ctx, c, m, n)
	if err := m.Unlock(a); err != nil {
		t.Fatal(err)
	}
	b := <-held
	if b == nil {
		t.FailNow()
	}
	return b, held
}

// lockersAtGate starts n goroutines that lock m's name through c, and
// returns once all n wait at the handle's gate; each sends the context of
// A hold passed in memory goes on with the releaser's watchdog renewal, so
// only a waiter renewed by the watchdog takes one: a waiter that asked for
// a fixed lease as long as the watchdog's TTL gets a pass in Redis, and the
// lock ends with its lease.
func TestPassInMemoryKeepsAFixedLease(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	const watchdog = 1500 * time.Millisecond
	c := newClient(t, r, WithWatchdogTimeout(watchdog))
	ctx := ctxT(t)
	const name = "pass30:fixed"
	m := c.Mutex(name)
	actx, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := lockersAtGate(t, ctx, c, m, 1) // a watchdog waiter: takes the pass in Redis, with spare tokens
	fixed := make(chan context.Context, 1)
	go func() {
		hctx, err := c.Mutex(name).TryLockContext(ctx, time.Minute, watchdog)
		if err != nil {
			t.Error(err)
		}
		fixed <- hctx
	}()
	waitFor(t, "the fixed-lease waiter at the gate", func() bool { return gateWaiters(m) == 2 })
	if err := m.Unlock(actx); err != nil {
		t.Fatal(err)
	}
	bctx := <-b
	if bctx == nil {
		t.FailNow()
	}
	if err := m.Unlock(bctx); err != nil {
		t.Fatal(err)
	}
	cctx := <-fixed
	if cctx == nil {
		t.FailNow()
	}
	waitFor(t, "the fixed lease's end in Redis", func() bool { return rdb.Exists(ctx, name).Val() == 0 })
	<-cctx.Done()
	if err := m.Unlock(cctx); !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock after the fixed lease ended: %v, want ErrLockLost or ErrNotHeld", err)
	}
}

// its hold (nil when its lock call failed) on the channel returned.
func lockersAtGate(t *testing.T, ctx context.Context, c *Client, m *Mutex, n int) <-chan context.Context {
	t.Helper()
	held := make(chan context.Context, n)
	for range n {
		go func() {
			hctx, err := c.Mutex(m.Name()).LockContext(ctx)
			if err != nil {
				t.Error(err)
			}
			held <- hctx
		}()
	}
	waitFor(t, "the goroutines at the gate", func() bool { return gateWaiters(m) == n })
	return held
}
