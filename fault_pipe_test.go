package dlock_test

import (
	"fmt"
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
// Client: two Clients, eight goroutines each on eight names, so that their
// calls go on the Clients' pipes when Redis dies. The pipes' calls in
// flight are resent through go-redis, the pipes redial; as in the restart
// scenario of 3 Clients × 2 goroutines, an overlap with a holder inside at
// the crash must be caught by fencing and its first holder told.
func TestFaultPipeRedisRestart(t *testing.T) {
	r := testenv.StartRedis(t)
	s := newScenario(t, "Redis killed and restarted, many callers per Client", r)
	var cs []*dlock.Client
	for range 2 {
		cs = append(cs, s.client(r.Addr(), dlock.WithWatchdogTimeout(600*time.Millisecond), dlock.WithCloseTimeout(time.Second)))
	}
	stop, piped := s.contendOnPipes(cs, holdOpts{wait: 10 * time.Second}, 20*time.Millisecond)
	s.killAndRestart(r)
	after := time.Now()
	time.Sleep(time.Second)
	stop()
	leaks := s.shutdown()
	row, st := s.row("SIGKILL, 300 ms down, restart empty; twice, 700 ms apart; 2 Clients × 8 goroutines on 8 names, holds 0–20 ms, watchdog 600 ms", leaks)
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
