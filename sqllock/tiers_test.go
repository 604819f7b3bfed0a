package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sony/gobreaker/v2"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
	"github.com/dlock-dev/dlock/sqllock"
)

// The two tiers together (dlock.WithFallback over a sqllock.Locker), against
// real redis-server, mariadbd and PostgreSQL.

const tierWatchdog = 300 * time.Millisecond

// tierObserver counts what the Client reports.
type tierObserver struct {
	dlock.NopObserver
	mu        sync.Mutex
	grants    map[string]int
	fallbacks map[string]int // by FallbackReason
	firstAt   map[string]time.Time
}

func newTierObserver() *tierObserver {
	return &tierObserver{grants: map[string]int{}, fallbacks: map[string]int{}, firstAt: map[string]time.Time{}}
}

func (o *tierObserver) AcquireStarted(context.Context, dlock.Kind, string) func(dlock.Acquisition) {
	return func(a dlock.Acquisition) {
		if !a.Acquired || a.Reentry {
			return
		}
		o.mu.Lock()
		o.grants[a.Backend]++
		o.mu.Unlock()
	}
}

func (o *tierObserver) FellBack(_ dlock.Kind, _, _ string, reason error) {
	o.mu.Lock()
	o.fallbacks[dlock.FallbackReason(reason)]++
	o.mu.Unlock()
}

func (o *tierObserver) count(m map[string]int, k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return m[k]
}

func (o *tierObserver) total(m map[string]int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// redisFor returns a go-redis client that fails fast when Redis is gone.
func redisFor(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 250 * time.Millisecond, ReadTimeout: 250 * time.Millisecond,
		WriteTimeout: 250 * time.Millisecond, MaxRetries: 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// tiered returns a Client with the Locker as its fallback, closed when the
// test ends.
func tiered(t testing.TB, addr string, l dlock.Fallback, fopts []dlock.FallbackOption, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	opts = append([]dlock.Option{dlock.WithWatchdogTimeout(tierWatchdog), dlock.WithFallback(l, fopts...),
		dlock.WithCloseTimeout(2 * time.Second)}, opts...)
	c, err := dlock.New(redisFor(t, addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fastBreaker is sony/gobreaker v2's two-step breaker, tripping after two
// failures in a row and probing again after cooldown.
func fastBreaker(cooldown time.Duration) dlock.Breaker {
	return gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
		Name:        "redis",
		Timeout:     cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 2 },
	})
}

// Only infrastructure failures fall back; contention, a cancelled ctx and
// fn's own errors never do, and fn runs at most once.
func TestFallbackOnlyOnInfrastructure(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		r := testenv.StartRedis(t)
		l := b.newLocker(t, b.open(t))
		obs := newTierObserver()
		c := tiered(t, r.Addr(), l, []dlock.FallbackOption{dlock.FallbackBreaker(fastBreaker(300 * time.Millisecond))}, dlock.WithObserver(obs))
		other := tiered(t, r.Addr(), l, nil)
		ctx := ctxT(t, time.Minute)
		name := "tiers:" + b.name

		backendOf := func(opts ...dlock.LockOption) (string, error) {
			var got string
			runs := 0
			err := c.WithLock(ctx, name, func(fctx context.Context) error {
				runs++
				g, _ := dlock.GrantFrom(fctx)
				got = g.Backend
				return nil
			}, opts...)
			if runs > 1 {
				t.Fatalf("fn ran %d times in one call", runs)
			}
			return got, err
		}
		if got, err := backendOf(); err != nil || got != dlock.BackendRedis {
			t.Fatalf("with Redis up: backend %q, %v", got, err)
		}
		// Contention: the wait runs out; no fallback.
		held := other.Mutex(name)
		if err := held.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := backendOf(dlock.WaitTime(100 * time.Millisecond)); !errors.Is(err, dlock.ErrWaitTimeout) {
			t.Fatalf("contended call = %v, want ErrWaitTimeout", err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// fn's error comes back as it is, once.
		sentinel := errors.New("business error")
		runs := 0
		if err := c.WithLock(ctx, name, func(context.Context) error { runs++; return sentinel }); err != sentinel || runs != 1 {
			t.Fatalf("fn's error: %v after %d runs", err, runs)
		}
		// A cancelled ctx: no fallback.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := c.WithLock(cctx, name, func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call = %v", err)
		}
		if n := obs.total(obs.fallbacks); n != 0 {
			t.Fatalf("%d fallbacks while Redis worked", n)
		}

		// Redis gone: the SQL tier grants, after the quarantine.
		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			got, err := backendOf(dlock.WaitTime(3 * time.Second))
			if err != nil || got != b.name {
				t.Fatalf("call %d with Redis down: backend %q, %v", i, got, err)
			}
		}
		if obs.count(obs.fallbacks, "refused")+obs.count(obs.fallbacks, "reset") == 0 || obs.count(obs.fallbacks, "breaker_open") == 0 {
			t.Fatalf("fallback reasons %v: want connection failures, then the open breaker", obs.fallbacks)
		}
		if obs.count(obs.grants, b.name) != 4 {
			t.Fatalf("grants by backend %v", obs.grants)
		}
		// Redis back: after the breaker's cooldown, grants return to Redis.
		if err := r.Restart(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			got, err := backendOf(dlock.WaitTime(3 * time.Second))
			if err == nil && got == dlock.BackendRedis {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("grants never returned to Redis: last %q, %v", got, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// fenced is a resource that counts concurrent holders and checks fencing
// tokens: a write carrying a token below the highest seen is rejected. An
// overlap is exposed when a stale write of one of the two holders was
// rejected: every holder writes on entering and on leaving, so two
// overlapping holders with distinct tokens always meet the check.
type fenced struct {
	mu       sync.Mutex
	who      map[uint64]string // tokens inside, for the report
	seen     []string
	inside   int
	top      uint64
	overlaps int // a holder entered while another was inside
	rejected int // stale writes refused
}

// hold enters with token, stays while ctx lasts or for work, and leaves,
// writing on both ends.
func (f *fenced) hold(ctx context.Context, token uint64, work time.Duration) {
	write := func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if token < f.top {
			f.rejected++
			return
		}
		f.top = token
	}
	f.mu.Lock()
	f.inside++
	if f.inside > 1 {
		f.overlaps++
		f.seen = append(f.seen, fmt.Sprintf("%d (%s) entered over %v", token, grantBackend(ctx), f.who))
	}
	if f.who == nil {
		f.who = map[uint64]string{}
	}
	f.who[token] = grantBackend(ctx)
	f.mu.Unlock()
	write()
	select {
	case <-ctx.Done():
	case <-time.After(work):
	}
	write()
	f.mu.Lock()
	f.inside--
	delete(f.who, token)
	f.mu.Unlock()
}

func grantBackend(ctx context.Context) string {
	g, _ := dlock.GrantFrom(ctx)
	return g.Backend + fmt.Sprintf("@%s", time.Now().Format("05.000"))
}

func (f *fenced) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("overlaps %d, stale writes rejected %d", f.overlaps, f.rejected)
}

// (a) Redis dies while a Redis holder is inside fn and others wait: the
// holder is told (its ctx ends) before the quarantine lets the others in
// through SQL. (b) Redis comes back while SQL holders are inside fn and new
// calls arrive: the new Redis grants also take the SQL lock during the
// recovery window, so they wait for the SQL holders.
func TestFallbackSchedulesOutageAndReturn(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		r := testenv.StartRedis(t)
		l := b.newLocker(t, b.open(t))
		fopts := []dlock.FallbackOption{dlock.FallbackBreaker(fastBreaker(200 * time.Millisecond))}
		cs := []*dlock.Client{tiered(t, r.Addr(), l, fopts), tiered(t, r.Addr(), l, fopts), tiered(t, r.Addr(), l, fopts)}
		ctx := ctxT(t, time.Minute)
		name := "sched:" + b.name
		var res fenced
		var tokens sync.Map // backend -> count

		call := func(c *dlock.Client, work time.Duration, entered chan<- struct{}) error {
			return c.WithLock(ctx, name, func(fctx context.Context) error {
				g, _ := dlock.GrantFrom(fctx)
				n, _ := tokens.LoadOrStore(g.Backend, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				if entered != nil {
					close(entered)
				}
				res.hold(fctx, g.Token, work)
				return nil
			}, dlock.WaitTime(10*time.Second))
		}
		// (a) A Redis holder inside fn, two waiters; Redis dies.
		entered := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		wg.Add(1)
		go func() { defer wg.Done(); errs <- call(cs[0], 2*time.Second, entered) }()
		<-entered
		for _, c := range cs[1:] {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- call(c, 300*time.Millisecond, nil) }()
		}
		time.Sleep(100 * time.Millisecond)
		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		// (b) SQL holders inside fn; Redis comes back; new calls arrive.
		sqlIn := make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); errs <- call(cs[1], 1500*time.Millisecond, sqlIn) }()
		<-sqlIn
		if err := r.Restart(); err != nil {
			t.Fatal(err)
		}
		// New calls arrive, spread over the SQL hold, past the breakers'
		// cooldown: their half-open probes reach Redis again.
		for i := range 4 {
			time.Sleep(250 * time.Millisecond)
			c := []*dlock.Client{cs[0], cs[2]}[i%2]
			wg.Add(1)
			go func() { defer wg.Done(); errs <- call(c, 50*time.Millisecond, nil) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			// The Redis holder of (a) learns of its loss; everything else
			// must succeed.
			if err != nil && !errors.Is(err, dlock.ErrLockLost) {
				t.Error(err)
			}
		}
		t.Logf("%s: %v; grants by tier: redis %v, %s %v", b.name, &res, load(&tokens, "redis"), b.name, load(&tokens, b.name))
		if res.overlaps != 0 {
			t.Fatalf("two holders at once across tiers: %v", &res)
		}
		if load(&tokens, b.name) == 0 || load(&tokens, "redis") < 2 {
			t.Fatalf("the schedule did not use both tiers: redis %d, %s %d", load(&tokens, "redis"), b.name, load(&tokens, b.name))
		}
	})
}

func load(m *sync.Map, k string) int64 {
	v, ok := m.Load(k)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// (c) One Client is cut off from a Redis the others still reach. Without
// FallbackStrict it falls back and may hold the SQL lock while a Redis
// holder is inside fn: the overlap is real, and the fencing token exposes
// it (the later grant's token is higher, so the older holder's writes are
// rejected). With FallbackStrict the cut-off Client sees the others' recent
// contact with Redis in the witness table and refuses the fallback.
func TestFallbackScheduleCutOffClient(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		r := testenv.StartRedis(t)
		l := b.newLocker(t, b.open(t))
		ctx := ctxT(t, time.Minute)
		for _, strict := range []bool{false, true} {
			name := fmt.Sprintf("cutoff:%s:%v", b.name, strict)
			fopts := []dlock.FallbackOption{dlock.FallbackQuarantine(100 * time.Millisecond)}
			if strict {
				fopts = append(fopts, dlock.FallbackStrict())
			}
			p := testenv.NewFaultProxy(t, r.Addr())
			cut := tiered(t, p.Addr(), l, fopts)
			ok := tiered(t, r.Addr(), l, fopts)
			var res fenced
			// Both reach Redis first (the strict witness records them).
			for _, c := range []*dlock.Client{cut, ok} {
				if err := c.WithLock(ctx, name, func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			entered := make(chan struct{})
			holder := make(chan error, 1)
			go func() {
				holder <- ok.WithLock(ctx, name, func(fctx context.Context) error {
					close(entered)
					res.hold(fctx, dlock.TokenFrom(fctx), 1500*time.Millisecond)
					return nil
				})
			}()
			<-entered
			_ = p.Refuse()
			p.Reset()
			err := cut.WithLock(ctx, name, func(fctx context.Context) error {
				res.hold(fctx, dlock.TokenFrom(fctx), 100*time.Millisecond)
				return nil
			}, dlock.WaitTime(time.Second))
			if herr := <-holder; herr != nil && !errors.Is(herr, dlock.ErrLockLost) {
				t.Fatal(herr)
			}
			_ = p.Heal()
			t.Logf("%s strict=%v: cut-off call: %v; %v", b.name, strict, err, &res)
			if strict {
				if !errors.Is(err, dlock.ErrUnavailable) || res.overlaps != 0 {
					t.Fatalf("strict: cut-off call = %v, %v; want ErrUnavailable and no overlap", err, &res)
				}
				continue
			}
			if err != nil {
				t.Fatalf("non-strict: the cut-off Client did not fall back: %v", err)
			}
			if res.overlaps != 1 || res.rejected == 0 {
				t.Fatalf("non-strict: want the overlap exposed by the fencing token: %v", &res)
			}
		}
	})
}

// (d) The breaker flaps: Redis refuses and accepts connections alternately,
// so half-open probes succeed and fail in turn, while calls keep coming.
// The quarantine and the recovery window keep the tiers from granting one
// name twice.
func TestFallbackScheduleFlappingBreaker(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		r := testenv.StartRedis(t)
		l := b.newLocker(t, b.open(t))
		ctx := ctxT(t, time.Minute)
		name := "flap:" + b.name
		var res fenced
		fopts := []dlock.FallbackOption{dlock.FallbackBreaker(fastBreaker(150 * time.Millisecond))}
		var proxies []*testenv.FaultProxy
		var cs []*dlock.Client
		for range 3 {
			p := testenv.NewFaultProxy(t, r.Addr())
			proxies = append(proxies, p)
			cs = append(cs, tiered(t, p.Addr(), l, fopts))
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var grants, failures atomic.Int64
		for i, c := range cs {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						err := c.WithLock(ctx, name, func(fctx context.Context) error {
							res.hold(fctx, dlock.TokenFrom(fctx), 20*time.Millisecond)
							return nil
						}, dlock.WaitTime(2*time.Second))
						if err == nil {
							grants.Add(1)
						} else {
							failures.Add(1)
							time.Sleep(20 * time.Millisecond)
						}
						_ = i
					}
				}()
			}
		}
		// Flap: every 400ms all proxies refuse and reset, then heal.
		for range 4 {
			time.Sleep(400 * time.Millisecond)
			for _, p := range proxies {
				_ = p.Refuse()
				p.Reset()
			}
			time.Sleep(400 * time.Millisecond)
			for _, p := range proxies {
				_ = p.Heal()
			}
		}
		close(stop)
		wg.Wait()
		t.Logf("%s: %d grants, %d failed calls; %v", b.name, grants.Load(), failures.Load(), &res)
		if res.overlaps != 0 {
			t.Fatalf("two holders at once while the breaker flapped: %v", &res)
		}
		if grants.Load() < 10 {
			t.Fatalf("only %d grants", grants.Load())
		}
	})
}

// The seeds' load test: 200 goroutines in 4 Clients on 20 names; Redis is
// killed in the middle and restarted later. Every call completes (granted
// by either tier, or a typed error within its wait), no two holders overlap
// on any name, the database never runs out of connections, and grants
// return to Redis once it is back.
func TestFallbackLoad(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		r := testenv.StartRedis(t)
		ctx := ctxT(t, time.Minute)
		const clients, perClient, names = 4, 50, 20
		var res [names]fenced
		type grant struct {
			at      time.Time
			backend string
		}
		var mu sync.Mutex
		var grants []grant
		errCounts := map[string]int{}
		var cs []*dlock.Client
		for range clients {
			db := b.open(t)
			db.SetMaxOpenConns(20) // 4 pools of 20 stay under both servers' connection limits
			l := b.newLocker(t, db)
			cs = append(cs, tiered(t, r.Addr(), l, []dlock.FallbackOption{dlock.FallbackBreaker(fastBreaker(300 * time.Millisecond))}))
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range cs {
			for g := range perClient {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						k := (i*perClient + g + n) % names
						err := c.WithLock(ctx, fmt.Sprintf("load:%s:%d", b.name, k), func(fctx context.Context) error {
							gr, _ := dlock.GrantFrom(fctx)
							mu.Lock()
							grants = append(grants, grant{time.Now(), gr.Backend})
							mu.Unlock()
							res[k].hold(fctx, gr.Token, 5*time.Millisecond)
							return nil
						}, dlock.WaitTime(3*time.Second))
						if err != nil {
							class := "other: " + err.Error()
							switch {
							case errors.Is(err, dlock.ErrWaitTimeout):
								class = "wait timeout"
							case errors.Is(err, dlock.ErrUnavailable):
								class = "unavailable"
							case errors.Is(err, sqllock.ErrTooManySessions):
								class = "too many sessions (refused at once)"
							case errors.Is(err, dlock.ErrLockLost):
								class = "lost"
							}
							mu.Lock()
							errCounts[class]++
							mu.Unlock()
							time.Sleep(10 * time.Millisecond)
						}
					}
				}()
			}
		}
		time.Sleep(1500 * time.Millisecond)
		killed := time.Now()
		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		restarted := time.Now()
		if err := r.Restart(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		close(stop)
		wg.Wait()

		byTier := map[string]int{}
		var firstFallback, firstBack time.Time
		for _, g := range grants {
			byTier[g.backend]++
			if g.backend != dlock.BackendRedis && g.at.After(killed) && firstFallback.IsZero() {
				firstFallback = g.at
			}
			if g.backend == dlock.BackendRedis && g.at.After(restarted) && firstBack.IsZero() {
				firstBack = g.at
			}
		}
		overlaps, rejected := 0, 0
		for i := range res {
			overlaps += res[i].overlaps
			rejected += res[i].rejected
		}
		t.Logf("%s: grants by tier %v; errors %v; kill → first fallback grant %v; restart → first Redis grant %v; overlaps %d, stale writes rejected %d",
			b.name, byTier, errCounts, firstFallback.Sub(killed).Round(time.Millisecond), firstBack.Sub(restarted).Round(time.Millisecond), overlaps, rejected)
		if overlaps != 0 {
			for i := range res {
				for _, o := range res[i].seen {
					t.Log(o)
				}
			}
			t.Fatalf("%d overlaps (killed %s, restarted %s)", overlaps, killed.Format("05.000"), restarted.Format("05.000"))
		}
		for class, n := range errCounts {
			if len(class) > 6 && class[:6] == "other:" {
				t.Errorf("%d untyped failures: %s", n, class)
			}
		}
		if firstFallback.IsZero() || firstBack.IsZero() || byTier[b.name] == 0 {
			t.Fatalf("the load did not go to the fallback and back: %v", byTier)
		}
	})
}
