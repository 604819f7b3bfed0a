package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// Eviction (issue 17 part 6): Redis configured with maxmemory and an LRU
// policy is filled with junk keys while many locks are held with watchdog
// renewal and a few more are contended. Redis then evicts keys of its
// choosing: junk, lock hashes, fencing counters, wait queues. A lock hash
// evicted under its holder is a lock lost while Redis keeps running: the
// holder must be told at its next renewal, and an overlap with whoever is
// granted the name next must be caught by fencing (an evicted fencing counter
// restarts from the server clock, above every earlier token).
//
// Lock keys carry TTLs, so volatile-lru evicts them exactly as allkeys-lru
// does; the junk carries a TTL too (both for volatile-lru to have other
// candidates and for the scenario's leak check).
func TestFaultEviction(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		t.Run(policy, func(t *testing.T) { evictionScenario(t, policy) })
	}
}

const (
	evictHeldPrefix = "evict:held:"
	evictHotPrefix  = "evict:hot:"
	evictJunkPrefix = "evict:junk:"
)

// eviction is one key evicted, as the keyevent notification told it.
type eviction struct {
	at  time.Time // when the notification arrived
	key string
}

// evictionWatch collects the keyevent notifications of evicted keys.
type evictionWatch struct {
	rdb  *redis.Client
	ps   *redis.PubSub
	done chan struct{}

	mu  sync.Mutex
	all []eviction
}

func watchEvictions(t *testing.T, addr string) *evictionWatch {
	t.Helper()
	w := &evictionWatch{rdb: redis.NewClient(rdbOptions(addr)), done: make(chan struct{})}
	w.ps = w.rdb.Subscribe(context.Background(), "__keyevent@0__:evicted")
	if _, err := w.ps.Receive(context.Background()); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		for {
			m, err := w.ps.ReceiveMessage(context.Background())
			if err != nil {
				return // closed
			}
			w.mu.Lock()
			w.all = append(w.all, eviction{at: time.Now(), key: m.Payload})
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *evictionWatch) close() {
	_ = w.ps.Close()
	<-w.done
	_ = w.rdb.Close()
}

func (w *evictionWatch) list() []eviction {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]eviction(nil), w.all...)
}

// countPrefix counts the evictions of keys starting with prefix.
func (w *evictionWatch) countPrefix(prefix string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.all {
		if strings.HasPrefix(e.key, prefix) {
			n++
		}
	}
	return n
}

// lossKind names a loss cause by the reason it wraps.
func lossKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{dlock.ErrTakenOver, "ErrTakenOver"},
		{dlock.ErrDataLost, "ErrDataLost"},
		{dlock.ErrUnconfirmed, "ErrUnconfirmed"},
		{dlock.ErrRenewRefused, "ErrRenewRefused"},
		{dlock.ErrForced, "ErrForced"},
		{dlock.ErrClosed, "ErrClosed"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}

func evictionScenario(t *testing.T, policy string) {
	const (
		heldNames = 120
		hotNames  = 6
		watchdog  = 900 * time.Millisecond
		junkSize  = 1024
		headroom  = 3 << 20 // maxmemory above what the held locks use
	)
	faults := fmt.Sprintf("maxmemory +3 MB, %s; junk keys (1 KiB, 60 s TTL) written until Redis evicted %%d lock hashes; %d locks held by 2 Clients with watchdog renewal, %d names contended by 2 Clients × 2 goroutines plus a poller per Client (TryLock every 10 ms), holds 20–300 ms, watchdog %v",
		policy, heldNames, hotNames, watchdog)
	r := testenv.StartRedis(t, testenv.WithArgs("--maxmemory-policy", policy, "--notify-keyspace-events", "Ee"))
	s := newScenario(t, "eviction, "+policy, r)
	opts := []dlock.Option{dlock.WithWatchdogTimeout(watchdog), dlock.WithCloseTimeout(time.Second)}
	holders := []*dlock.Client{s.client(r.Addr(), opts...), s.client(r.Addr(), opts...)}
	hot := []*dlock.Client{s.client(r.Addr(), opts...), s.client(r.Addr(), opts...)}
	w := watchEvictions(t, r.Addr())

	// The held locks: one goroutine per name takes it and stays inside
	// until told of a loss (then takes it again) or until stop.
	stop := make(chan struct{})
	var causesMu sync.Mutex
	causes := map[string]int{} // loss causes told through fn's context
	var held sync.WaitGroup
	var granted sync.WaitGroup
	for i := range heldNames {
		c := holders[i%len(holders)]
		name := fmt.Sprintf("%s%03d", evictHeldPrefix, i)
		held.Add(1)
		granted.Add(1)
		go func() {
			defer held.Done()
			first := true
			for n := 0; ; n++ {
				select {
				case <-stop:
					if first {
						granted.Done()
					}
					return
				default:
				}
				var v *visit
				err := c.WithLock(context.Background(), name, func(ctx context.Context) error {
					v = s.res.enterName(name, fmt.Sprintf("%s#%d", name, n), dlock.TokenFrom(ctx), false)
					if first {
						first = false
						granted.Done()
					}
					select {
					case <-stop:
					case <-ctx.Done():
						if cause := context.Cause(ctx); errors.Is(cause, dlock.ErrLockLost) {
							s.res.tell(v, time.Now(), fmt.Errorf("fn's context: %w", cause))
							causesMu.Lock()
							causes[lossKind(cause)]++
							causesMu.Unlock()
						}
					}
					s.res.leave(v)
					return nil
				}, dlock.WaitTime(5*time.Second))
				if errors.Is(err, dlock.ErrLockLost) {
					s.res.tell(v, time.Now(), fmt.Errorf("WithLock returned: %w", err))
				}
				s.callErr(err)
			}
		}()
	}
	granted.Wait()
	var stopHot []func()
	for i := range hotNames {
		stopHot = append(stopHot, s.contend(hot, 2, holdOpts{name: fmt.Sprintf("%s%d", evictHotPrefix, i), wait: 10 * time.Second},
			uint64(300+10*i), 20*time.Millisecond, 300*time.Millisecond))
	}
	// Pollers take a hot name the moment its hash is gone, as a polling
	// service instance would: an eviction under a holder becomes an overlap.
	pollStop := make(chan struct{})
	var pollers sync.WaitGroup
	for i, c := range hot {
		for j := range hotNames {
			pollers.Add(1)
			go func() {
				defer pollers.Done()
				name := fmt.Sprintf("%s%d", evictHotPrefix, j)
				work := randWork(uint64(500+10*i+j), 20*time.Millisecond, 300*time.Millisecond)
				for n := 0; ; n++ {
					select {
					case <-pollStop:
						return
					case <-time.After(10 * time.Millisecond):
					}
					_ = s.holdOnce(c, fmt.Sprintf("poller%d/%d#%d", i, j, n), name, work(), dlock.WaitTime(0))
				}
			}()
		}
	}
	time.Sleep(300 * time.Millisecond)

	// Memory pressure: maxmemory a few MB above what is used now, then junk
	// until enough lock hashes went (or the time is up).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := r.Info(ctx, "memory")
	if err != nil {
		t.Fatal(err)
	}
	used, err := strconv.ParseInt(info["used_memory"], 10, 64)
	if err != nil {
		t.Fatalf("used_memory %q: %v", info["used_memory"], err)
	}
	if _, err := r.Do(ctx, "CONFIG", "SET", "maxmemory", strconv.FormatInt(used+headroom, 10)); err != nil {
		t.Fatal(err)
	}
	filler := redis.NewClient(rdbOptions(r.Addr()))
	junk := strings.Repeat("x", junkSize)
	fillStart := time.Now()
	written := 0
	for time.Since(fillStart) < 4*time.Second && (w.countPrefix(evictHeldPrefix) < 30 || w.countPrefix(evictHotPrefix) < 3) {
		pipe := filler.Pipeline()
		for range 64 {
			pipe.Set(ctx, evictJunkPrefix+strconv.Itoa(written), junk, time.Minute)
			written++
		}
		if _, err := pipe.Exec(ctx); err != nil {
			s.callErr(fmt.Errorf("filler: %w", err))
		}
		time.Sleep(2 * time.Millisecond) // let the watchdogs and contenders in
	}
	fillEnd := time.Now()
	s.fault("fill")
	// Two watchdogs for every holder of an evicted hash to hear of it.
	time.Sleep(2 * watchdog)
	evs := w.list()
	close(stop)
	held.Wait()
	close(pollStop)
	pollers.Wait()
	for _, f := range stopHot {
		f()
	}
	// The junk goes before the leak check (it has a TTL anyway).
	for i := 0; i < written; i += 512 {
		var ks []string
		for j := i; j < written && j < i+512; j++ {
			ks = append(ks, evictJunkPrefix+strconv.Itoa(j))
		}
		if err := filler.Del(ctx, ks...).Err(); err != nil {
			t.Errorf("deleting the junk: %v", err)
		}
	}
	stats, _ := r.Info(ctx, "stats")
	_ = filler.Close()
	w.close()
	leaks := s.shutdown()

	// What went, and what each evicted lock's holder learned.
	byKind := map[string]int{}
	for _, e := range evs {
		switch {
		case strings.HasPrefix(e.key, evictJunkPrefix):
			byKind["junk"]++
		case strings.HasPrefix(e.key, evictHeldPrefix):
			byKind["held hash"]++
		case strings.HasPrefix(e.key, evictHotPrefix):
			byKind["contended hash"]++
		case strings.HasPrefix(e.key, "dlock:fence:"):
			byKind["fence"]++
		case strings.HasPrefix(e.key, "dlock:queue:"):
			byKind["queue"]++
		default:
			byKind["other"]++
		}
	}
	var delays []time.Duration
	heldEvicted, heldTold, lateUntold := 0, 0, 0
	var untold []string
	// Each eviction of a held name's hash ends one of its visits (the holder
	// is told, leaves and takes the name again: the next visit is a new
	// hash). A notice can reach the test after the holder was told and came
	// back, so notices are matched to the name's visits in order: the
	// earliest visit not yet matched that started before the notice. A visit
	// that ended for want of a renewal reply (ErrUnconfirmed, a loaded box)
	// had no eviction and is passed over.
	s.res.mu.Lock()
	visitsOf := map[string][]*visit{}
	for _, v := range s.res.visits {
		if strings.HasPrefix(v.name, evictHeldPrefix) {
			visitsOf[v.name] = append(visitsOf[v.name], v)
		}
	}
	next := map[string]int{}
	for _, e := range evs {
		if !strings.HasPrefix(e.key, evictHeldPrefix) {
			continue
		}
		vs, i := visitsOf[e.key], next[e.key]
		for i < len(vs) && strings.Contains(vs[i].toldBy, dlock.ErrUnconfirmed.Error()) {
			i++
		}
		if i >= len(vs) || !vs[i].start.Before(e.at) {
			next[e.key] = i
			continue
		}
		in := vs[i]
		next[e.key] = i + 1
		heldEvicted++
		if in.told.IsZero() {
			// Evictions after the fill (by dlock's own writes near the
			// limit) may be too recent for a renewal to have seen them.
			if e.at.After(fillEnd) {
				lateUntold++
			} else if in.end.IsZero() || in.end.After(e.at) {
				untold = append(untold, fmt.Sprintf("%s (token %d, evicted %v after its grant)", in.who, in.token, e.at.Sub(in.start).Round(time.Millisecond)))
			}
			continue
		}
		heldTold++
		d := in.told.Sub(e.at)
		if d < 0 {
			d = 0 // told before the notice reached the test
		}
		delays = append(delays, d)
	}
	s.res.mu.Unlock()
	sort.Slice(delays, func(i, j int) bool { return delays[i] > delays[j] })

	row, st := s.row(fmt.Sprintf(faults, byKind["held hash"]+byKind["contended hash"]), leaks)
	row.Signal = -1
	if len(delays) > 0 {
		row.Signal = delays[0]
	}
	var ck []string
	causesMu.Lock()
	for k, n := range causes {
		ck = append(ck, fmt.Sprintf("%s %d", k, n))
	}
	causesMu.Unlock()
	sort.Strings(ck)
	median := time.Duration(-1)
	if len(delays) > 0 {
		median = delays[len(delays)/2]
	}
	row.Notes = fmt.Sprintf("evicted: %d held lock hashes (%d holders told, median %s after the eviction notice), %d contended lock hashes, %d fencing counters, %d queues, %d junk keys (evicted_keys %s); held holders told by: %s; %d MB of junk in %v; %d lock calls failed; %d evicted after the fill and not yet told at the end",
		heldEvicted, heldTold, formatDuration(median), byKind["contended hash"], byKind["fence"], byKind["queue"], byKind["junk"], stats["evicted_keys"],
		strings.Join(ck, ", "), written*junkSize>>20, fillEnd.Sub(fillStart).Round(100*time.Millisecond), s.errCount("other"), lateUntold)
	t.Logf("%s: evictions by kind %v, overlaps %d (accepted %d, caught %d), told %d", s.name, byKind, st.overlaps, st.accepted, st.caught, st.told)

	// Fencing must catch every overlap. A holder whose hash was evicted and
	// who released before its next renewal is not told: its release finds
	// its field gone, which Unlock cannot tell from its own release resent
	// by go-redis (as for an operator's DEL, see the package doc). One that
	// stayed inside for a watchdog after the overlap began must have been
	// told by its renewal.
	if st.accepted > 0 {
		t.Errorf("%s: %d overlaps accepted by the resource (not caught by fencing)", s.name, st.accepted)
	}
	releasedUntold := 0
	s.res.mu.Lock()
	for _, o := range s.res.overlaps {
		if !o.a.told.IsZero() {
			continue
		}
		if o.a.end.Sub(o.b.start) > watchdog {
			t.Errorf("%s: %s (token %d) stayed %v inside after %s (token %d) entered and was never told",
				s.name, o.a.who, o.a.token, o.a.end.Sub(o.b.start).Round(time.Millisecond), o.b.who, o.b.token)
		} else {
			releasedUntold++
		}
	}
	s.res.mu.Unlock()
	row.Notes += fmt.Sprintf("; %d of %d overlaps' first holders released before a renewal saw the eviction and were not told (Unlock returned nil; their last write was rejected)", releasedUntold, st.overlaps)
	record(t, row)
	for _, u := range untold {
		t.Errorf("%s: holder of an evicted lock never told within two watchdogs: %s", s.name, u)
	}
	if heldEvicted == 0 {
		t.Errorf("%s: no held lock hash was evicted (%v)", s.name, byKind)
	}
}
