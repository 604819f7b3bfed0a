package dlock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// Connection resets under many callers: two Clients, each behind its own
// proxy, eight goroutines each on eight names (each name contended by one
// goroutine of each Client), short holds, so that more than four calls of
// a Client are in flight and go out on the Client's pipe; one Client's
// connections, the pipe's among them, are reset every 100 ms. Every call a
// pipe held when its connection died is resent through go-redis (every
// script is safe to resend), and the pipe is dialed again. Redis keeps its
// data: no overlap, no stale write, no leak, no holder told of a loss.
func TestFaultPipeConnectionResets(t *testing.T) {
	r := testenv.StartRedis(t)
	s := newScenario(t, "pipe connection resets", r)
	var proxies []*testenv.FaultProxy
	var cs []*dlock.Client
	for range 2 {
		p := s.proxy(r.Addr())
		proxies = append(proxies, p)
		cs = append(cs, s.client(p.Addr(), dlock.WithWatchdogTimeout(600*time.Millisecond)))
	}
	stop, piped := s.contendOnPipes(cs, holdOpts{}, 2*time.Millisecond)
	resets := 0
	const clients = 2
	for i := range 20 {
		resets += proxies[i%clients].Reset()
		s.fault("reset")
		time.Sleep(100 * time.Millisecond)
	}
	healed := time.Now()
	time.Sleep(300 * time.Millisecond)
	stop()
	leaks := s.shutdown()
	row, st := s.row("RST of one Client's connections (its pipe's among them) every 100 ms, 2 s, 2 Clients × 8 goroutines on 8 names, holds 0–2 ms, watchdog 600 ms", leaks)
	row.Notes = fmt.Sprintf("%d connections reset; %d calls went on the pipes meanwhile; %d lock calls failed", resets, piped(), s.errCount("other"))
	record(t, row)
	s.assertExclusive(st)
	s.assertNoLoss(st, "while Redis kept every lock")
	if n := s.grantsAfter(healed); n == 0 {
		t.Error("no grant after the resets stopped")
	}
	if piped() == 0 {
		t.Error("no call went on a pipe during the resets: the scenario did not test it")
	}
}

// contendOnPipes starts, for each of eight names, one goroutine per Client
// of cs running withLockLoop on it with o and holds of 0 to hi, so that
// more than four calls of a Client are in flight, and returns once every
// Client's pipe is in use. stop stops the goroutines and waits; piped
// counts the calls the Clients' pipes wrote since contendOnPipes returned.
func (s *scenario) contendOnPipes(cs []*dlock.Client, o holdOpts, hi time.Duration) (stop func(), piped func() int64) {
	var stops []func()
	for k := range 8 {
		oo := o
		oo.name = fmt.Sprintf("pipe%d", k)
		stops = append(stops, s.contend(cs, 1, oo, uint64(10*k), 0, hi))
	}
	stop = func() {
		for _, f := range stops {
			f()
		}
	}
	calls := func() (n int64) {
		for _, c := range cs {
			n += dlock.PipeCallsForTest(c)
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, c := range cs {
		for !dlock.PipingForTest(c) {
			if time.Now().After(deadline) {
				stop()
				s.t.Fatal("a Client did not put its pipe in use: the scenario would not test it")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	before := calls()
	return stop, func() int64 { return calls() - before }
}

// Redis killed (SIGKILL) and restarted empty, twice, under many callers per
// Client: two Clients, eight goroutines each on eight names and eight
// pollers each on eight more, so that their calls go on the Clients' pipes
// when Redis dies. The pipes' calls in flight are resent through go-redis,
// the pipes redial; as in the restart scenario of 3 Clients × 2
// goroutines, an overlap with a holder inside at the crash must be caught
// by fencing and its stale holder told.
func TestFaultPipeRedisRestart(t *testing.T) {
	r := testenv.StartRedis(t)
	s := newScenario(t, "Redis killed and restarted, many callers per Client", r)
	_, stop, piped := s.loadPipes(r)
	s.killAndRestart(r)
	after := time.Now()
	time.Sleep(time.Second)
	stop()
	leaks := s.shutdown()
	row, st := s.row("SIGKILL, 300 ms down, restart empty; twice, 700 ms apart; 2 Clients × (8 goroutines on 8 names + 8 pollers on 8 more), holds 0–20 ms, watchdog 600 ms", leaks)
	row.Notes = fmt.Sprintf("%d calls went on the pipes meanwhile; %d lock calls failed while Redis was down", piped(), s.errCount("other"))
	record(t, row)
	s.assertFenced(st)
	if n := s.grantsAfter(after); n == 0 {
		t.Error("no grant after the last restart")
	}
	if piped() == 0 {
		t.Error("no call went on a pipe: the scenario did not test it")
	}
}

// CLIENT PAUSE ALL of 300 ms, three times, under many callers per Client:
// two Clients, eight goroutines each on eight names and eight pollers each
// on eight more, so that the calls made while Redis is paused (the
// pollers' tries, the releases of the holds that end meanwhile, the
// renewals) are more than four per Client and most of them go out on the
// Clients' pipes, and wait there, written and unanswered, until Redis runs
// again. As in the CLIENT PAUSE scenario of 3 Clients × 2 goroutines,
// Redis keeps its data and expires nothing while paused: no overlap.
// Unlike its long pause (two watchdogs, which must tell the holder inside
// fn), these last half the watchdog: longer than every hold and than the
// renewal period, so that every hold's renewal falls due during one and
// is answered late, but shorter than what a hold has left of its validity
// when a pause begins (at least the watchdog less a renewal period and the
// drift margin, 392 ms). So no holder may be told of a loss; and the
// pipes' read timeout (1 s) is far: every call a pipe wrote during a
// pause must be answered on the same connection after it, none resent
// through go-redis.
func TestFaultPipeClientPause(t *testing.T) {
	const pause = 300 * time.Millisecond
	r := testenv.StartRedis(t)
	s := newScenario(t, "CLIENT PAUSE, many callers per Client", r)
	cs, stop, piped := s.loadPipes(r)
	conns := func() (n int64) {
		for _, c := range cs {
			n += dlock.PipeConnsForTest(c)
		}
		return n
	}
	conns0 := conns()
	var paused []int64 // calls the pipes wrote during each pause
	var resumed time.Time
	ctx := context.Background()
	for range 3 {
		time.Sleep(pause)
		if _, err := r.Do(ctx, "CLIENT", "PAUSE", strconv.Itoa(int(pause.Milliseconds())), "ALL"); err != nil {
			t.Fatal(err)
		}
		s.fault("client pause")
		before := piped()
		// Counted until shortly before the pause ends: a call written
		// later may be answered at once.
		time.Sleep(pause - 30*time.Millisecond)
		paused = append(paused, piped()-before)
		time.Sleep(30 * time.Millisecond)
		resumed = time.Now()
	}
	time.Sleep(time.Second)
	stop()
	redialed := conns() - conns0
	leaks := s.shutdown()
	row, st := s.row("CLIENT PAUSE ALL 300 ms, three times, 300 ms apart; 2 Clients × (8 goroutines on 8 names + 8 pollers on 8 more), holds 0–20 ms, watchdog 600 ms", leaks)
	row.Notes = fmt.Sprintf("%s calls written on the pipes during the pauses, answered on the same connections after them (%d pipe connections redialed); %d lock calls failed",
		joinInts(paused), redialed, s.errCount("other"))
	record(t, row)
	s.assertExclusive(st)
	s.assertNoLoss(st, "while Redis kept every lock and each pause was shorter than what a hold had left")
	if n := s.errCount("other"); n > 0 {
		t.Errorf("%d lock calls failed across pauses shorter than every timeout", n)
	}
	if redialed > 0 {
		t.Errorf("%d pipe connections put in use during the pauses: a pipe's connection broke and its calls were resent through go-redis, not answered on it", redialed)
	}
	if n := s.grantsAfter(resumed); n == 0 {
		t.Error("no grant after the last pause")
	}
	for i, n := range paused {
		if n == 0 {
			t.Errorf("no call went on a pipe during pause %d: the scenario did not test it", i+1)
		}
	}
}

// FLUSHALL twice, 700 ms apart, under many callers per Client: two
// Clients, eight goroutines each on eight names and eight pollers each on
// eight more, so that the calls that meet the emptied server (the releases
// and renewals of the holds inside at the flush, the attempts granted on
// the empty keys) go out on the Clients' pipes. The connections do not
// break; the data is gone. As in the FLUSHALL scenario of 3 Clients × 2
// goroutines (which has pollers too: a lock that vanished is taken at
// once), an overlap with a holder inside at the flush must be caught by
// fencing and its stale holder told, also one whose lock was granted
// again within a millisecond of its own grant (why_gone reads the new
// sequence's start from keys.FenceStart; before, from the counter's TTL,
// it let 3 of 11 runs' such holders go untold).
func TestFaultPipeFlushAll(t *testing.T) {
	const window = 200 * time.Millisecond // after a flush: longer than any hold inside at it
	r := testenv.StartRedis(t)
	s := newScenario(t, "FLUSHALL, many callers per Client", r)
	_, stop, piped := s.loadPipes(r)
	var after []int64 // calls the pipes wrote in the window after each flush
	var flushed time.Time
	ctx := context.Background()
	for i := range 2 {
		if i > 0 {
			time.Sleep(700*time.Millisecond - window)
		}
		// Recorded before it is sent: a holder may be told of the flush
		// before its reply reaches the test, and its signal must count
		// from this flush, not the one before.
		s.fault("flushall")
		before := piped()
		if _, err := r.Do(ctx, "FLUSHALL"); err != nil {
			t.Fatal(err)
		}
		flushed = time.Now()
		time.Sleep(window)
		after = append(after, piped()-before)
	}
	time.Sleep(time.Second)
	stop()
	leaks := s.shutdown()
	row, st := s.row("FLUSHALL twice, 700 ms apart; 2 Clients × (8 goroutines on 8 names + 8 pollers on 8 more), holds 0–20 ms, watchdog 600 ms", leaks)
	s.assertFenced(st)
	row.Notes = fmt.Sprintf("%s calls went on the pipes in the %v after each flush; %d of the overlaps' stale holders entered after the live one (their grant's reply read late); %d lock calls failed",
		joinInts(after), window, st.staleSecond, s.errCount("other"))
	record(t, row)
	if n := s.grantsAfter(flushed); n == 0 {
		t.Error("no grant after the last flush")
	}
	for i, n := range after {
		if n == 0 {
			t.Errorf("no call went on a pipe in the %v after flush %d: the scenario did not test it", window, i+1)
		}
	}
}

// loadPipes starts the load of the scenarios whose faults hit Redis
// itself while calls are on the pipes: two Clients of r (watchdog 600 ms,
// closed within a second), eight contenders each on eight names
// (contendOnPipes, holds 0-20 ms) and eight pollers each on eight more
// (pollOwnNames: a contender waiting its turn has no call in flight, a
// poller mostly has one). stop stops the pollers, then the contenders;
// piped counts the calls the pipes wrote since.
func (s *scenario) loadPipes(r *testenv.Redis) (cs []*dlock.Client, stop func(), piped func() int64) {
	for range 2 {
		cs = append(cs, s.client(r.Addr(), dlock.WithWatchdogTimeout(600*time.Millisecond), dlock.WithCloseTimeout(time.Second)))
	}
	stopContenders, piped := s.contendOnPipes(cs, holdOpts{wait: 10 * time.Second}, 20*time.Millisecond)
	stopPolls := s.pollOwnNames(cs, 20*time.Millisecond)
	return cs, func() { stopPolls(); stopContenders() }, piped
}

// pollOwnNames starts, as serverScenario does beside its contenders, a
// poller per Client of cs on each of eight names of their own ("poll0" to
// "poll7": a poller on a contender's name would wait at its Client's gate
// for the name, behind the contender, and make no call): every 5 ms it
// tries the lock without waiting, and holds it 0 to hi when granted. A
// contender waiting for its turn has no call in flight; a poller mostly
// has one. When Redis stalls, each Client's eight pollers' calls wait
// with the contenders' releases and the renewals, more than four, and
// the rest of them go on the Client's pipe.
func (s *scenario) pollOwnNames(cs []*dlock.Client, hi time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cs {
		for k := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("poll%d", k)
				work := randWork(uint64(1000+10*i+k), 0, hi)
				for n := 0; ; n++ {
					select {
					case <-done:
						return
					case <-time.After(5 * time.Millisecond):
					}
					_ = s.holdOnce(c, fmt.Sprintf("c%d/%s#%d", i, name, n), name, work(), dlock.WaitTime(0))
				}
			}()
		}
	}
	return func() { close(done); wg.Wait() }
}

// joinInts lists ns as "a, b and c".
func joinInts(ns []int64) string {
	var out []string
	for _, n := range ns {
		out = append(out, strconv.FormatInt(n, 10))
	}
	if len(out) < 2 {
		return strings.Join(out, "")
	}
	return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1]
}
