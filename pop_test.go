package dlock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// A waiter of another Client pops its hand-off from its box: the release
// puts the grant there, the waiter sends no attempt, its hold starts with
// the claim window as TTL and is renewed to the full TTL at half of it.
func TestHandoffPopped(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	ctx := ctxT(t)
	const name = "pop30:handoff"
	a, b := newClient(t, r).Mutex(name), newClient(t, r).Mutex(name)
	actx, err := a.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan context.Context, 1)
	go func() {
		bctx, err := b.LockContext(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- bctx
	}()
	waitFor(t, "the waiter's pop", func() bool { return commands(t, r)["blpop"] >= 1 })
	resetCounts(t, ctx, r)
	if err := a.Unlock(actx); err != nil {
		t.Fatal(err)
	}
	bctx := <-got
	if bctx == nil {
		t.FailNow()
	}
	s := commands(t, r)
	if s["evalsha"] != 1 || s["rpush"] != 1 || s["publish"] != 0 {
		t.Errorf("the hand-off ran %v, want the release alone (1 script) putting the grant in the box", s)
	}
	if TokenFrom(bctx) <= TokenFrom(actx) {
		t.Errorf("the popped token %d is not above %d", TokenFrom(bctx), TokenFrom(actx))
	}
	if ttl := rdb.PTTL(ctx, name).Val(); ttl > 2*time.Second {
		t.Errorf("the popped hold's TTL is %v, want the claim window (2s) until its first renewal", ttl)
	}
	// Renewed to the watchdog's TTL at half the claim window.
	waitFor(t, "the popped hold renewed", func() bool { return rdb.PTTL(ctx, name).Val() > 20*time.Second })
	if bctx.Err() != nil {
		t.Fatalf("the popped hold ended: %v", context.Cause(bctx))
	}
	if err := b.Unlock(bctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, name).Val(); n != 0 {
		t.Error("the lock outlived its Unlock")
	}
}

// Where BLPOP is refused (an ACL without it), the waiter that queued to pop
// still gets the lock, by its re-check: within its claim window, though its
// re-checks are a minute apart (a hand-off to it makes no sound). The
// Client's later waiters are woken by messages instead.
func TestHandoffPopRefused(t *testing.T) {
	r := testenvRedis(t)
	mustDo(t, r, "ACL", "SETUSER", "nopop", "on", ">pw", "~*", "&*", "+@all", "-blpop")
	ctx := ctxT(t)
	const name = "pop30:refused"
	a := newClient(t, r).Mutex(name)
	limited := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: "nopop", Password: "pw"})
	t.Cleanup(func() { _ = limited.Close() })
	c := newClientOn(t, limited, WithHandoffClaim(4*time.Second), withRecheck(time.Minute))
	for round := range 2 {
		actx, err := a.LockContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := lockUnlockAside(ctx, c, name)
		waitFor(t, "the waiter queued", func() bool {
			return r.NewClient(t).LLen(ctx, c.Mutex(name).p.Keys().Queue).Val() == 1
		})
		releaseToWaiter(t, ctx, r, a, actx, got, round)
		if s := commands(t, r); round == 1 && (s["rpush"] != 0 || s["publish"] == 0) {
			t.Errorf("round 2: the hand-off ran %v, want a message (the Client no longer pops)", s)
		}
	}
}

// An error reply that refuses nothing for good (UNBLOCKED, which every
// blocked pop gets when a failover turns its server into a replica) is no
// refusal: the waiter pops again and takes its hand-off from the box, and
// the Client's later waiters still pop.
func TestHandoffPopSurvivesUnblock(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	ctx := ctxT(t)
	const name = "pop30:unblocked"
	a := newClient(t, r).Mutex(name)
	c := newClient(t, r, withRecheck(time.Minute)) // a hand-off not popped would wait a minute
	for round := range 2 {
		actx, err := a.LockContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := lockUnlockAside(ctx, c, name)
		waitFor(t, "the waiter's pop", func() bool { return popClient(t, rdb) != "" })
		if round == 0 {
			if err := rdb.Do(ctx, "client", "unblock", popClient(t, rdb), "error").Err(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the waiter's next pop", func() bool { return commands(t, r)["blpop"] >= 2 && popClient(t, rdb) != "" })
		}
		releaseToWaiter(t, ctx, r, a, actx, got, round)
		if s := commands(t, r); s["rpush"] != 1 {
			t.Errorf("round %d: the hand-off and the waiter's release ran %v, want the grant put in the box", round, s)
		}
	}
}

// lockUnlockAside locks and unlocks name on a goroutine of its own, within
// 15s, and sends the outcome.
func lockUnlockAside(ctx context.Context, c *Client, name string) <-chan error {
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		got <- lockUnlock(wctx, c, name, 1)
	}()
	return got
}

// releaseToWaiter resets r's stats, unlocks a's hold and waits for the
// waiter's outcome on got.
func releaseToWaiter(t *testing.T, ctx context.Context, r *testenv.Redis, a *Mutex, actx context.Context, got <-chan error, round int) {
	t.Helper()
	resetCounts(t, ctx, r)
	if err := a.Unlock(actx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("round %d: the waiter: %v", round, err)
	}
}

// popClient is the id of the client blocked in a BLPOP, or "".
func popClient(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	for _, line := range strings.Split(rdb.ClientList(context.Background()).Val(), "\n") {
		if strings.Contains(line, " cmd=blpop ") && strings.Contains(line, " flags=b ") {
			return strings.TrimPrefix(strings.Fields(line)[0], "id=")
		}
	}
	return ""
}

// Pops take connections of the go-redis client the Client was given, at
// most a quarter of its pool: a waiter on a pool of 3 is woken by a message
// and claims, leaving the pool to the application.
func TestHandoffPopLeavesSmallPoolsAlone(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	const name = "pop30:small-pool"
	a := newClient(t, r).Mutex(name)
	small := redis.NewClient(&redis.Options{Addr: r.Addr(), PoolSize: 3})
	t.Cleanup(func() { _ = small.Close() })
	b := newClientOn(t, small).Mutex(name)
	actx, err := a.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		err := b.Lock(ctx)
		if err == nil {
			err = b.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, "the waiter queued", func() bool { return r.NewClient(t).LLen(ctx, b.p.Keys().Queue).Val() == 1 })
	resetCounts(t, ctx, r)
	if err := a.Unlock(actx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if s := commands(t, r); s["blpop"] != 0 || s["publish"] == 0 {
		t.Errorf("the hand-off ran %v, want a message and no pop", s)
	}
}

// ForceUnlock takes an unpopped hand-off with the lock: a grant waiting in
// an evicted owner's box would otherwise still read as the lock's.
func TestForceUnlockDeletesUnpoppedGrant(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	ctx := ctxT(t)
	const name = "pop30:forced"
	m := newClient(t, r).Mutex(name)
	hctx, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// As the release that handed the lock to this owner would have left
	// it, had its waiter not popped it yet.
	box := keys.GrantBox(m.p.Keys().Queue, holderField(m))
	if err := rdb.RPush(ctx, box, "7 2000").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, box, time.Minute)
	if ok, err := newClient(t, r).Mutex(name).ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock: %v, %v", ok, err)
	}
	if n := rdb.Exists(ctx, box).Val(); n != 0 {
		t.Error("the evicted owner's unpopped grant outlived ForceUnlock")
	}
	_ = m.Unlock(hctx)
}

// A semaphore waiter of another Client pops its permit as a Mutex waiter
// pops its lock: the release puts "0 <claim ms>" in the waiter's box, the
// waiter sends no claim, its permit lasts the claim window in Redis until
// its first renewal (at half the window), and a weighted permit pops the
// same way.
func TestSemaphoreHandoffPopped(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	ctx := ctxT(t)
	const name = "pop30:semaphore"
	a, b := newClient(t, r).Semaphore(name, 2), newClient(t, r).Semaphore(name, 2)
	held, err := a.AcquireN(ctx, 2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Permit, 1)
	go func() {
		p, err := b.AcquireN(ctx, 2, 20*time.Second, 0)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitFor(t, "the waiter's pop", func() bool { return popClient(t, rdb) != "" })
	resetCounts(t, ctx, r)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p == nil {
		t.FailNow()
	}
	s := commands(t, r)
	if s["evalsha"] != 1 || s["rpush"] != 1 || s["publish"] != 0 || s["blpop"] != 0 {
		t.Errorf("the hand-off ran %v, want the release alone (1 script) putting the grant in the box", s)
	}
	deadline := func() time.Duration {
		t.Helper()
		score, err := rdb.ZScore(ctx, b.p.Keys().Permits, p.ID()).Result()
		if err != nil {
			t.Fatalf("the popped permit %q is not in Redis: %v", p.ID(), err)
		}
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(int64(score)-now.UnixMilli()) * time.Millisecond
	}
	if d := deadline(); d > 2*time.Second {
		t.Errorf("the popped permit lasts %v, want the claim window (2s) until its first renewal", d)
	}
	waitFor(t, "the popped permit renewed", func() bool { return deadline() > 20*time.Second })
	select {
	case <-p.Done():
		t.Fatalf("the popped permit ended: %v", p.Err())
	default:
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, b.p.Keys().Permits).Val(); n != 0 {
		t.Errorf("%d permits outlived their release", n)
	}
}

// Where Redis refuses a semaphore waiter's box (an ACL that grants the
// semaphore's keys by name), BLPOP of it is refused too, and the release
// that hands the waiter its permit tells it by a message instead: the
// waiter claims at once, not at its re-check (a waiter whose pop was
// refused re-checks four times per claim window: every 10 s here).
func TestSemaphoreBoxRefusedByACL(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	const name = "pop30:sem-acl"
	ks := keys.Semaphore(name)
	admin := rdbFor(t, r)
	if err := admin.Do(ctx, "ACL", "SETUSER", "sembox", "on", ">pw", "resetkeys", "~"+ks.Permits, "~"+ks.Size, "~"+ks.Queue, "~"+ks.Seen, "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	user := func() *Client {
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: "sembox", Password: "pw"})
		t.Cleanup(func() { _ = rdb.Close() })
		return newClientOn(t, rdb, WithHandoffClaim(40*time.Second), withRecheck(time.Minute))
	}
	a, b := user().Semaphore(name, 1), user().Semaphore(name, 1)
	held, err := a.Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Permit, 1)
	go func() {
		p, err := b.Acquire(ctx, time.Minute, 0)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitFor(t, "the waiter's refused pop", func() bool {
		for _, line := range strings.Split(admin.Info(ctx, "commandstats").Val(), "\n") {
			if strings.HasPrefix(line, "cmdstat_blpop:") && !strings.Contains(line, "rejected_calls=0,") {
				return admin.LLen(ctx, ks.Queue).Val() == 1
			}
		}
		return false
	})
	resetCounts(t, ctx, r)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p == nil {
		t.FailNow()
	}
	if s := commands(t, r); s["publish"] != 1 || s["rpush"] != 0 {
		t.Errorf("the hand-off ran %v, want the release telling the waiter by a message", s)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A popping waiter whose pops get no answer (here the application took its
// go-redis client's whole pool, so a pop cannot get a connection) re-checks
// as a waiter whose pop was refused does: the permit a release puts in its
// box is taken by its next attempt, within the claim window, and goes to
// it, the first in line, not to the waiter queued behind it. Its re-checks
// are otherwise a minute apart, so without that it would lose its turn.
func TestHandoffPopFailingRechecks(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	const name = "pop30:starved"
	admin := r.NewClient(t)
	a := newClient(t, r).Semaphore(name, 1)
	ks := a.p.Keys()
	held, err := a.Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	app := redis.NewClient(&redis.Options{Addr: r.Addr(), PoolSize: 4}) // one pop slot
	t.Cleanup(func() { _ = app.Close() })
	b := newClientOn(t, app, withRecheck(time.Minute)).Semaphore(name, 1)
	c := newClient(t, r, withRecheck(time.Minute)).Semaphore(name, 1)
	type outcome struct {
		who string
		p   *Permit
	}
	got := make(chan outcome, 2)
	acquire := func(who string, s *Semaphore) {
		p, err := s.Acquire(ctx, 20*time.Second, 0)
		if err != nil {
			t.Errorf("%s: %v", who, err)
		}
		got <- outcome{who, p}
	}
	go acquire("b", b)
	waitFor(t, "b's pop", func() bool { return popClient(t, admin) != "" })
	takePool(t, r, app, 4)
	go acquire("c", c)
	waitFor(t, "c queued behind b", func() bool { return admin.LLen(ctx, ks.Queue).Val() == 2 })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-got
	if first.p == nil {
		t.FailNow()
	}
	if first.who != "b" {
		t.Errorf("%s got the permit first; want b, first in line and handed the permit", first.who)
	}
	_ = first.p.Release(ctx)
	if second := <-got; second.p != nil {
		_ = second.p.Release(ctx)
	}
}

// takePool has n goroutines block on rdb (an application's workers waiting
// for jobs) until every connection of its pool has been held for two
// seconds or more, and releases them at the end of the test.
func takePool(t *testing.T, r *testenv.Redis, rdb *redis.Client, n int) {
	t.Helper()
	const jobs = "pop30:jobs"
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = rdb.BLPop(context.Background(), 0, jobs).Err()
		}()
	}
	admin := r.NewClient(t)
	t.Cleanup(func() {
		for range n {
			admin.RPush(context.Background(), jobs, "stop")
		}
		wg.Wait()
		admin.Del(context.Background(), jobs)
	})
	waitFor(t, "the application's workers to hold the whole pool", func() bool {
		held := 0
		for _, line := range strings.Split(admin.ClientList(context.Background()).Val(), "\n") {
			if !strings.Contains(line, " cmd=blpop ") || !strings.Contains(line, " flags=b ") {
				continue
			}
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "idle="); ok {
					// idle: seconds since the client's last command; a
					// waiter's own pops are renewed every second.
					if s, _ := strconv.Atoi(v); s >= 2 {
						held++
					}
				}
			}
		}
		return held >= n
	})
}

// A grant in a box whose window is longer than the waiter's TTL was not
// written by a hand-off (a hand-off's window is at most the TTL in the
// waiter's entry): the waiter ignores it and pops again, for either kind,
// and takes the real hand-off later.
func TestHandoffPopWindowBeyondTheTTLIsNoGrant(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	admin := r.NewClient(t)
	for _, k := range []struct {
		kind, forged string
		take         func(c *Client) (func(context.Context) error, error)
		box          func(c *Client) string
	}{
		{"mutex", "7 999999999", func(c *Client) (func(context.Context) error, error) {
			m := c.Mutex("pop30:long")
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return m.Unlock, nil
		}, func(c *Client) string { return c.Mutex("pop30:long").p.Keys().Queue }},
		{"semaphore", "0 999999999", func(c *Client) (func(context.Context) error, error) {
			p, err := c.Semaphore("pop30:long", 1).Acquire(ctx, 20*time.Second, 0)
			if err != nil {
				return nil, err
			}
			return p.Release, nil
		}, func(c *Client) string { return c.Semaphore("pop30:long", 1).p.Keys().Queue }},
	} {
		t.Run(k.kind, func(t *testing.T) {
			a, b := newClient(t, r), newClient(t, r, withRecheck(time.Minute))
			release, err := k.take(a)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan func(context.Context) error, 1)
			go func() {
				rel, err := k.take(b)
				if err != nil {
					t.Error(err)
				}
				got <- rel
			}()
			queue := k.box(b)
			waitFor(t, "b's pop", func() bool { return popClient(t, admin) != "" })
			_, _, field, ok := keys.ParseQueueEntry(admin.LIndex(ctx, queue, 0).Val())
			if !ok {
				t.Fatal("b is not queued")
			}
			resetCounts(t, ctx, r)
			box := keys.GrantBox(queue, field)
			admin.RPush(ctx, box, k.forged)
			admin.PExpire(ctx, box, time.Minute)
			waitFor(t, "b's next pop", func() bool {
				return len(got) > 0 || commands(t, r)["blpop"] >= 1 && popClient(t, admin) != ""
			})
			select {
			case <-got:
				t.Fatalf("b took %q from its box as a grant", k.forged)
			default:
			}
			if err := release(ctx); err != nil {
				t.Fatal(err)
			}
			rel := <-got
			if rel == nil {
				t.FailNow()
			}
			if err := rel(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
