package dlock_test

// The fault suite (issue 13): scenarios that inject faults into the network
// between dlock Clients and Redis (internal/testenv.FaultProxy) or into Redis
// itself, while holders and waiters run, and measure what happens to a
// protected resource. Each scenario records one row of RELIABILITY.md (see
// fault_report_test.go).
//
// The resource (fencedResource) stands for the thing a lock protects. Every
// holder writes to it when it enters (just after the grant) and when it
// leaves (just before the release), carrying its fencing token; the resource
// rejects a write whose token is lower than one it has accepted, or equal to
// one accepted from another holder (a stale write). Two holders inside at
// once are an overlap. An overlap is caught when the resource rejected a
// write of one of the two after the second one entered (the later token won);
// it is accepted when both holders' writes landed, i.e. the resource was
// corrupted. While Redis keeps its data there must be no overlap at all; where
// Redis loses data, overlaps are possible and each must be caught, and the
// stale holder of the two (granted first: the lower token) must have been
// told of its loss.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/lockcheck"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// visit is one holder's stay in the resource.
type visit struct {
	name   string // the lock name: the resource keeps one cell per name
	who    string
	token  uint64
	shared bool
	start  time.Time
	end    time.Time // zero while inside
	// writes in order: the time and whether the resource accepted it.
	writes []write
	told   time.Time // when the holder learned of a loss; zero if never
	toldBy string    // how: the cause or error it was told with
}

type write struct {
	at time.Time
	ok bool
}

// overlap is two visits inside at once; a entered first.
type overlap struct{ a, b *visit }

// cell is the resource's state for one lock name.
type cell struct {
	maxToken uint64
	maxBy    *visit
	inside   map[*visit]struct{}
	hist     lockcheck.History
}

// fencedResource counts concurrent holders and checks fencing tokens, one
// cell per lock name. Safe for concurrent use.
type fencedResource struct {
	mu       sync.Mutex
	cells    map[string]*cell
	visits   []*visit
	overlaps []overlap
}

func newResource() *fencedResource {
	return &fencedResource{cells: make(map[string]*cell)}
}

func (r *fencedResource) cellLocked(name string) *cell {
	c := r.cells[name]
	if c == nil {
		c = &cell{inside: make(map[*visit]struct{})}
		r.cells[name] = c
	}
	return c
}

// writeLocked applies the token check. r.mu must be held.
func (r *fencedResource) writeLocked(v *visit, now time.Time) bool {
	c := r.cellLocked(v.name)
	ok := v.shared // read holds do not write
	if !v.shared {
		switch {
		case v.token > c.maxToken:
			c.maxToken, c.maxBy, ok = v.token, v, true
		case v.token == c.maxToken && c.maxBy == v:
			ok = true
		}
	}
	v.writes = append(v.writes, write{at: now, ok: ok})
	return ok
}

// enter records a holder entering the single cell "" (for scenarios with
// one lock name).
func (r *fencedResource) enter(who string, token uint64, shared bool) *visit {
	return r.enterName("", who, token, shared)
}

// enterName records a holder of name entering with token (a write), and
// the overlaps it starts.
func (r *fencedResource) enterName(name, who string, token uint64, shared bool) *visit {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	c := r.cellLocked(name)
	v := &visit{name: name, who: who, token: token, shared: shared, start: now}
	for o := range c.inside {
		if !(o.shared && shared) {
			r.overlaps = append(r.overlaps, overlap{a: o, b: v})
		}
	}
	r.writeLocked(v, now)
	c.inside[v] = struct{}{}
	r.visits = append(r.visits, v)
	return v
}

// leave records the holder's last write and its leaving.
func (r *fencedResource) leave(v *visit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.writeLocked(v, now)
	v.end = now
	c := r.cellLocked(v.name)
	delete(c.inside, v)
	c.hist.Add(lockcheck.Hold{Owner: v.who, Shared: v.shared, Token: v.token, Start: v.start, End: v.end})
}

// check runs the history checker on every cell.
func (r *fencedResource) check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, c := range r.cells {
		if err := c.hist.Check(); err != nil {
			return fmt.Errorf("lock %q: %w", name, err)
		}
	}
	return nil
}

// tell records that v's holder learned of a loss at t, by how (the first
// time counts).
func (r *fencedResource) tell(v *visit, t time.Time, how error) {
	if v == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v.told.IsZero() || t.Before(v.told) {
		v.told, v.toldBy = t, how.Error()
	}
}

// toldList describes the holders told of a loss, for failure messages.
func (r *fencedResource) toldList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, v := range r.visits {
		if !v.told.IsZero() {
			out = append(out, fmt.Sprintf("%s on %q (token %d, held %v, told %v after the grant: %s)",
				v.who, v.name, v.token, v.end.Sub(v.start), v.told.Sub(v.start), v.toldBy))
		}
	}
	return out
}

// resourceStats is what a scenario reports about its resource.
type resourceStats struct {
	grants, overlaps, accepted, caught int
	told, rejected                     int
	staleSecond                        int      // overlaps whose stale holder entered second
	untold                             []string // overlaps whose stale holder was never told
}

// stats classifies the overlaps. Call it once every holder has left.
func (r *fencedResource) stats() resourceStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := resourceStats{grants: len(r.visits), overlaps: len(r.overlaps)}
	for _, v := range r.visits {
		if !v.told.IsZero() {
			s.told++
		}
		for _, w := range v.writes {
			if !w.ok {
				s.rejected++
			}
		}
	}
	for _, o := range r.overlaps {
		// Caught: a write of either, from the moment b entered on, was
		// rejected. Every holder writes when it leaves, so the first one
		// always writes again after b entered.
		caught := false
		for _, v := range []*visit{o.a, o.b} {
			for _, w := range v.writes {
				if !w.at.Before(o.b.start) && !w.ok {
					caught = true
				}
			}
		}
		if caught {
			s.caught++
		} else {
			s.accepted++
		}
		// The stale holder is the one granted first: the lower token.
		// It is usually the one that entered first, but a grant's reply
		// can be read after a later grant's holder entered (a slow
		// reader, a flush between the two grants): then the first inside
		// holds the live lock and the second the stale one.
		stale, live := o.a, o.b
		if !o.a.shared && !o.b.shared && o.b.token < o.a.token {
			stale, live = o.b, o.a
			s.staleSecond++
		}
		if stale.told.IsZero() {
			s.untold = append(s.untold, fmt.Sprintf("%s (token %d) overlapped by %s (token %d)", stale.who, stale.token, live.who, live.token))
		}
	}
	return s
}

// signalDelays returns, for holders told of a loss, the time from the last
// fault before their signal to the signal; the largest comes first.
func (r *fencedResource) signalDelays(faults []time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for _, v := range r.visits {
		if v.told.IsZero() {
			continue
		}
		var last time.Time
		for _, f := range faults {
			if !f.After(v.told) && f.After(last) {
				last = f
			}
		}
		if !last.IsZero() && !v.start.After(v.told) {
			out = append(out, v.told.Sub(last))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] > out[j] })
	return out
}

// scenario is one fault scenario's clients, faults and leak accounting.
type scenario struct {
	t       *testing.T
	name    string
	res     *fencedResource
	servers []*testenv.Redis // checked for leaks at the end

	mu       sync.Mutex
	faults   []time.Time
	faultLog []string
	clients  []*dlock.Client
	rdbs     []redis.UniversalClient
	proxies  []*testenv.FaultProxy
	base     int // goroutines before the first client
	errs     map[string]int
	shutDown bool
	// waits are the lock calls' waits, from the call to the grant.
	waits []lockWait
}

// lockWait is one lock call's wait: when it was granted and how long after
// the call.
type lockWait struct {
	granted time.Time
	waited  time.Duration
}

func newScenario(t *testing.T, name string, servers ...*testenv.Redis) *scenario {
	s := &scenario{t: t, name: name, res: newResource(), servers: servers, base: -1, errs: map[string]int{}}
	t.Cleanup(s.closeAll) // a safety net: shutdown does it in order
	return s
}

func (s *scenario) takeBaseline() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base < 0 {
		s.base = runtime.NumGoroutine()
	}
}

// rdbOptions are go-redis's defaults with shorter timeouts, so that a call
// into a partition fails after a second instead of three.
func rdbOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		DialTimeout:              time.Second,
		ReadTimeout:              time.Second,
		WriteTimeout:             time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// proxy starts a fault proxy in front of target.
func (s *scenario) proxy(target string) *testenv.FaultProxy {
	s.takeBaseline()
	p, err := testenv.StartFaultProxy(target)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.proxies = append(s.proxies, p)
	s.mu.Unlock()
	return p
}

// client returns a dlock Client over its own go-redis client to addr.
func (s *scenario) client(addr string, opts ...dlock.Option) *dlock.Client {
	s.takeBaseline()
	return s.clientOver(redis.NewClient(rdbOptions(addr)), opts...)
}

// clientOver returns a dlock Client over rdb, which the scenario closes.
func (s *scenario) clientOver(rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	s.takeBaseline()
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.rdbs = append(s.rdbs, rdb)
	s.mu.Unlock()
	return c
}

// fault records that a fault was injected now.
func (s *scenario) fault(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, time.Now())
	s.faultLog = append(s.faultLog, what)
}

// callErr counts an error returned by a lock call, by kind.
func (s *scenario) callErr(err error) {
	kind := "other"
	switch {
	case err == nil:
		return
	case errors.Is(err, dlock.ErrLockLost):
		kind = "lost"
	case errors.Is(err, dlock.ErrWaitTimeout):
		kind = "wait timeout"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		kind = "ctx"
	case errors.Is(err, dlock.ErrNotReplicated):
		kind = "not replicated"
	}
	s.mu.Lock()
	s.errs[kind]++
	if kind == "other" && s.errs[kind] <= 3 {
		s.t.Logf("%s: lock call error: %v", s.name, err)
	}
	s.mu.Unlock()
}

func (s *scenario) errCount(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs[kind]
}

// closeAll closes clients, then go-redis clients, then proxies.
func (s *scenario) closeAll() {
	s.mu.Lock()
	clients, rdbs, proxies := s.clients, s.rdbs, s.proxies
	s.clients, s.rdbs, s.proxies = nil, nil, nil
	s.mu.Unlock()
	for _, c := range clients {
		if err := c.Close(); err != nil {
			s.t.Logf("%s: Close: %v", s.name, err)
		}
	}
	for _, r := range rdbs {
		_ = r.Close()
	}
	for _, p := range proxies {
		_ = p.Close()
	}
}

// shutdown closes everything and counts leaks: goroutines above the
// baseline, channels still subscribed and keys without a TTL on the
// scenario's servers. It fails the test on a leak.
func (s *scenario) shutdown() int {
	s.t.Helper()
	s.closeAll()
	leaks := 0
	var what []string
	// Goroutines: back to the baseline (clients and proxies end theirs).
	deadline := time.Now().Add(5 * time.Second)
	for s.base >= 0 {
		n := runtime.NumGoroutine() - s.base
		if n <= 0 {
			break
		}
		if time.Now().After(deadline) {
			leaks += n
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			what = append(what, fmt.Sprintf("%d goroutines above the baseline:\n%s", n, buf))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range s.servers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, w := serverLeaks(ctx, r)
		cancel()
		leaks += n
		what = append(what, w...)
	}
	if leaks > 0 {
		s.t.Errorf("%s: %d leaks: %s", s.name, leaks, strings.Join(what, "; "))
	}
	s.shutDown = true
	return leaks
}

// serverLeaks counts the channels still subscribed on r (after a grace
// period: subscriptions of closed connections vanish with them) and the keys
// without a TTL.
func serverLeaks(ctx context.Context, r *testenv.Redis) (int, []string) {
	var what []string
	n := 0
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := r.Do(ctx, "PUBSUB", "CHANNELS", "*")
		var chans []any
		all, _ := v.([]any)
		for _, c := range all {
			if s, _ := c.(string); !strings.HasPrefix(s, "__sentinel__:") {
				chans = append(chans, c) // not Sentinel's own
			}
		}
		if err == nil && len(chans) == 0 {
			break
		}
		if time.Now().After(deadline) {
			n += len(chans)
			what = append(what, fmt.Sprintf("%s: channels still subscribed: %v (%v)", r.Addr(), chans, err))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cursor := "0"
	for {
		v, err := r.Do(ctx, "SCAN", cursor, "COUNT", "1000")
		if err != nil {
			return n + 1, append(what, fmt.Sprintf("%s: SCAN: %v", r.Addr(), err))
		}
		arr, _ := v.([]any)
		if len(arr) != 2 {
			return n + 1, append(what, fmt.Sprintf("%s: SCAN answered %v", r.Addr(), v))
		}
		cursor, _ = arr[0].(string)
		keys, _ := arr[1].([]any)
		for _, k := range keys {
			if ttl, err := r.Do(ctx, "PTTL", k); err == nil && ttl == int64(-1) {
				n++
				what = append(what, fmt.Sprintf("%s: key %v has no TTL", r.Addr(), k))
			}
		}
		if cursor == "0" {
			return n, what
		}
	}
}

// holdOpts describes one worker loop of withLockLoop.
type holdOpts struct {
	name string
	work func() time.Duration // how long to stay inside
	wait time.Duration        // WithLock's wait; 0 means 5s
	opts []dlock.LockOption
}

// withLockLoop runs WithLock on c over and over until stop is closed: each
// hold enters the resource with its token, stays for o.work() or until its
// context ends, and leaves. A loss told through fn's context or WithLock's
// error is recorded on the visit.
func (s *scenario) withLockLoop(c *dlock.Client, who string, o holdOpts, stop <-chan struct{}) {
	wait := o.wait
	if wait == 0 {
		wait = 5 * time.Second
	}
	opts := append([]dlock.LockOption{dlock.WaitTime(wait)}, o.opts...)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		s.holdOnce(c, fmt.Sprintf("%s#%d", who, i), o.name, o.work(), opts...)
	}
}

// holdOnce takes name once with WithLock and stays inside the resource for
// d (or until fn's context ends). It returns WithLock's error.
func (s *scenario) holdOnce(c *dlock.Client, who, name string, d time.Duration, opts ...dlock.LockOption) error {
	var v *visit
	set, err := dlock.ResolveForTest(opts...)
	if err != nil {
		return err
	}
	shared := set.Kind == dlock.KindRead
	called := time.Now()
	err = c.WithLock(context.Background(), name, func(ctx context.Context) error {
		s.noteWait(called)
		v = s.res.enterName(name, who, dlock.TokenFrom(ctx), shared)
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			if cause := context.Cause(ctx); errors.Is(cause, dlock.ErrLockLost) {
				s.res.tell(v, time.Now(), fmt.Errorf("fn's context: %w", cause))
			}
		}
		timer.Stop()
		s.res.leave(v)
		return nil
	}, opts...)
	if errors.Is(err, dlock.ErrLockLost) {
		s.res.tell(v, time.Now(), fmt.Errorf("WithLock returned: %w", err))
	}
	s.callErr(err)
	return err
}

// noteWait records a lock call made at called and granted now.
func (s *scenario) noteWait(called time.Time) {
	now := time.Now()
	s.mu.Lock()
	s.waits = append(s.waits, lockWait{granted: now, waited: now.Sub(called)})
	s.mu.Unlock()
}

// longestWait returns the longest wait of a lock call granted after t0.
func (s *scenario) longestWait(t0 time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	for _, w := range s.waits {
		if w.granted.After(t0) {
			longest = max(longest, w.waited)
		}
	}
	return longest
}

// row builds the scenario's report row from its resource.
func (s *scenario) row(faults string, leaks int) (reportRow, resourceStats) {
	st := s.res.stats()
	s.mu.Lock()
	faultTimes := append([]time.Time(nil), s.faults...)
	s.mu.Unlock()
	r := reportRow{
		Scenario: s.name,
		Faults:   faults,
		Grants:   st.grants,
		Accepted: st.accepted,
		Caught:   st.caught,
		Told:     st.told,
		Leaks:    leaks,
		Signal:   -1,
	}
	if d := s.res.signalDelays(faultTimes); len(d) > 0 {
		r.Signal = d[0]
	}
	return r, st
}

// assertExclusive fails unless the history shows no overlap and tokens
// increasing in grant order (Redis kept its data).
func (s *scenario) assertExclusive(st resourceStats) {
	s.t.Helper()
	if st.overlaps > 0 {
		s.t.Errorf("%s: %d overlaps (%d accepted by the resource) while Redis kept its data", s.name, st.overlaps, st.accepted)
	}
	if err := s.res.check(); err != nil {
		s.t.Errorf("%s: history: %v", s.name, err)
	}
	if st.rejected > 0 {
		s.t.Errorf("%s: the resource rejected %d stale writes while Redis kept its data", s.name, st.rejected)
	}
}

// assertNoLoss fails if a holder was told of a loss (Redis kept every lock
// and renewals could get through).
func (s *scenario) assertNoLoss(st resourceStats, why string) {
	s.t.Helper()
	if st.told > 0 {
		s.t.Errorf("%s: %d holders told of a loss %s: %s", s.name, st.told, why, strings.Join(s.res.toldList(), "; "))
	}
}

// assertFenced fails unless every overlap was caught by fencing and its
// stale holder was told (Redis lost data).
func (s *scenario) assertFenced(st resourceStats) {
	s.t.Helper()
	if st.accepted > 0 {
		s.t.Errorf("%s: %d overlaps accepted by the resource (not caught by fencing)", s.name, st.accepted)
	}
	for _, u := range st.untold {
		s.t.Errorf("%s: holder never told of its loss: %s", s.name, u)
	}
}

// liveness fails unless at least min grants happened after t0.
func (s *scenario) grantsAfter(t0 time.Time) int {
	s.res.mu.Lock()
	defer s.res.mu.Unlock()
	n := 0
	for _, v := range s.res.visits {
		if v.start.After(t0) {
			n++
		}
	}
	return n
}

// contend starts perClient goroutines per Client, each running
// withLockLoop on o; the returned function stops them and waits.
func (s *scenario) contend(cs []*dlock.Client, perClient int, o holdOpts, seed uint64, lo, hi time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cs {
		for g := range perClient {
			wg.Add(1)
			oo := o
			oo.work = randWork(seed+uint64(i*100+g), lo, hi)
			go func() {
				defer wg.Done()
				s.withLockLoop(c, fmt.Sprintf("c%d/g%d", i, g), oo, done)
			}()
		}
	}
	return func() { close(done); wg.Wait() }
}
