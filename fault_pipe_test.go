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
	const clients, names = 2, 8
	var proxies []*testenv.FaultProxy
	var cs []*dlock.Client
	for range clients {
		p := s.proxy(r.Addr())
		proxies = append(proxies, p)
		cs = append(cs, s.client(p.Addr(), dlock.WithWatchdogTimeout(600*time.Millisecond)))
	}
	var stops []func()
	for k := range names {
		stops = append(stops, s.contend(cs, 1, holdOpts{name: fmt.Sprintf("pipe%d", k)}, uint64(10*k), 0, 2*time.Millisecond))
	}
	deadline := time.Now().Add(20 * time.Second)
	for !dlock.PipingForTest(cs[0]) || !dlock.PipingForTest(cs[1]) {
		if time.Now().After(deadline) {
			t.Fatal("no Client put its pipe in use: the scenario would not test it")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := dlock.PipeCallsForTest(cs[0]) + dlock.PipeCallsForTest(cs[1])
	resets := 0
	for i := range 20 {
		resets += proxies[i%clients].Reset()
		s.fault("reset")
		time.Sleep(100 * time.Millisecond)
	}
	healed := time.Now()
	time.Sleep(300 * time.Millisecond)
	for _, stop := range stops {
		stop()
	}
	piped := dlock.PipeCallsForTest(cs[0]) + dlock.PipeCallsForTest(cs[1]) - before
	leaks := s.shutdown()
	row, st := s.row("RST of one Client's connections (its pipe's among them) every 100 ms, 2 s, 2 Clients × 8 goroutines on 8 names, holds 0–2 ms, watchdog 600 ms", leaks)
	row.Notes = fmt.Sprintf("%d connections reset; %d calls went on the pipes meanwhile; %d lock calls failed", resets, piped, s.errCount("other"))
	record(t, row)
	s.assertExclusive(st)
	s.assertNoLoss(st, "while Redis kept every lock")
	if n := s.grantsAfter(healed); n == 0 {
		t.Error("no grant after the resets stopped")
	}
	if piped == 0 {
		t.Error("no call went on a pipe during the resets: the scenario did not test it")
	}
}
