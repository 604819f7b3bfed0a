//go:build dlocktrace && !nodlock

// The per-hop breakdown of one hand-off (bench/README.md, "Where a hand-off's
// time goes"). Built only with the dlocktrace tag, which turns on the
// engine's hop trace (internal/notify/trace_on.go); without it the engine's
// hot path carries no trace at all.
//
//	cd bench && go test -tags dlocktrace -run TestHandoffBreakdown -count=1 -v .
//
// DLOCK_TRACE_W (100 Clients), DLOCK_TRACE_K (4 grants each) and
// DLOCK_TRACE_HOLD (5ms) change the run; DLOCK_TRACE_OUT names a file the
// table is also written to.

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/notify"
)

// traceEvent kinds beyond notify's hops: a socket write or read returned.
const (
	evWrite = notify.Hop(100 + iota)
	evRead
)

// clientTrace is one Client's events, in the order they happened.
type clientTrace struct {
	mu sync.Mutex
	ev []traceAt
}

type traceAt struct {
	hop notify.Hop
	at  time.Time
}

func (c *clientTrace) add(hop notify.Hop, at time.Time) {
	c.mu.Lock()
	c.ev = append(c.ev, traceAt{hop, at})
	c.mu.Unlock()
}

// first is the time of the first event of kind hop in [from, to], or zero.
func (c *clientTrace) first(hop notify.Hop, from, to time.Time) time.Time {
	for _, e := range c.ev {
		if e.hop == hop && !e.at.Before(from) && !e.at.After(to) {
			return e.at
		}
	}
	return time.Time{}
}

// last is the time of the last event of kind hop in [from, to], or zero.
func (c *clientTrace) last(hop notify.Hop, from, to time.Time) time.Time {
	var t time.Time
	for _, e := range c.ev {
		if e.hop == hop && !e.at.Before(from) && !e.at.After(to) {
			t = e.at
		}
	}
	return t
}

// tracedConn times the return of every Write and Read on a connection of
// one Client.
type tracedConn struct {
	net.Conn
	tr *clientTrace
}

func (c tracedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.tr.add(evWrite, time.Now())
	return n, err
}

func (c tracedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.tr.add(evRead, time.Now())
	}
	return n, err
}

type traceGrant struct {
	client            int
	granted, released time.Time // Lock returned; Unlock called
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestHandoffBreakdown(t *testing.T) {
	w, k := envInt("DLOCK_TRACE_W", 100), envInt("DLOCK_TRACE_K", 4)
	hold := 5 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("DLOCK_TRACE_HOLD")); err == nil {
		hold = d
	}
	srv := startTestRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	traces := make([]*clientTrace, w)
	clients := make([]*dlock.Client, w)
	byID := make(map[string]*clientTrace, w)
	for i := range w {
		tr := &clientTrace{}
		traces[i] = tr
		var d net.Dialer
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return tracedConn{c, tr}, nil
		}})
		c, err := dlock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
		byID[c.ID()] = tr
		t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
	}
	pingTight, pingIdle := pingRoundTrips(ctx, t, srv.Addr)

	// Warm-up: every Client dials, loads its scripts and waits once on the
	// hot key (its hub subscribes), then Redis goes quiet.
	hot := "trace:hot"
	var wg sync.WaitGroup
	for i := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := clients[i].Mutex(hot)
			if err := m.Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
			_ = m.Unlock(ctx)
		}()
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond)
	for _, tr := range traces {
		tr.ev = tr.ev[:0]
	}
	notify.SetTrace(func(client string, hop notify.Hop, at time.Time) {
		if tr := byID[client]; tr != nil {
			tr.add(hop, at)
		}
	})
	defer notify.SetTrace(nil)

	var mu sync.Mutex
	var grants []traceGrant
	for i := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range k {
				m := clients[i].Mutex(hot)
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				g := traceGrant{client: i, granted: time.Now()}
				time.Sleep(hold)
				g.released = time.Now()
				mu.Lock()
				grants = append(grants, g)
				mu.Unlock()
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	notify.SetTrace(nil)
	table, err := breakdown(grants, traces)
	if err != nil {
		t.Fatal(err)
	}
	head := fmt.Sprintf("W=%d separate Clients, K=%d, hold %v; host: %s; PING p50 %.1f µs in a tight loop, %.1f µs sent every 10 ms\n\n",
		w, k, hold, cpuModel(), pingTight, pingIdle)
	t.Log("\n" + head + table)
	if out := os.Getenv("DLOCK_TRACE_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(head+table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// breakdown follows each hand-off (one holder's Unlock to the next
// holder's Lock returning, in grant order) through the traced hops, and
// tabulates each hop's p50 and p90 in µs over the hand-offs that passed
// every hop (a waiter that a re-check or a release message woke instead of
// a hand-off message is left out, and counted).
func breakdown(grants []traceGrant, traces []*clientTrace) (string, error) {
	sort.Slice(grants, func(i, j int) bool { return grants[i].granted.Before(grants[j].granted) })
	names := []string{
		"Unlock called → release sent",
		"release sent → its write() returns",
		"write() → the waiter's hub has the message",
		"hub → waiter goroutine running",
		"waiter running → claim sent",
		"claim sent → its write() returns",
		"claim write() → reply read from the socket",
		"reply read → reply decoded by the waiter",
		"reply decoded → Lock returns",
	}
	hops := make([][]float64, len(names))
	var gaps []float64
	popped := make([][]float64, len(popNames))
	var popGaps []float64
	skipped := 0
	for n := 1; n < len(grants); n++ {
		prev, g := grants[n-1], grants[n]
		rel, rcv := traces[prev.client], traces[g.client]
		t0, t9 := prev.released, g.granted
		if !t0.Before(t9) || prev.client == g.client {
			skipped++
			continue
		}
		if pop := popHops(rel, rcv, t0, t9); pop != nil {
			for i := range popNames {
				popped[i] = append(popped[i], float64(pop[i+1].Sub(pop[i]).Nanoseconds())/1e3)
			}
			popGaps = append(popGaps, float64(t9.Sub(t0).Nanoseconds())/1e3)
			continue
		}
		ts := []time.Time{t0}
		ts = append(ts, rel.first(notify.HopRelease, t0, t9))
		ts = append(ts, rel.first(evWrite, ts[1], t9))
		ts = append(ts, rcv.last(notify.HopHub, ts[2], t9))
		ts = append(ts, rcv.first(notify.HopWake, ts[3], t9))
		ts = append(ts, rcv.first(notify.HopClaim, ts[4], t9))
		ts = append(ts, rcv.first(evWrite, ts[5], t9))
		ts = append(ts, rcv.first(evRead, ts[6], t9))
		ts = append(ts, rcv.last(notify.HopReply, ts[7], t9))
		ts = append(ts, t9)
		ok := true
		for i := 1; i < len(ts); i++ {
			ok = ok && !ts[i].IsZero() && !ts[i].Before(ts[i-1])
		}
		if !ok {
			skipped++
			continue
		}
		for i := range names {
			hops[i] = append(hops[i], float64(ts[i+1].Sub(ts[i]).Nanoseconds())/1e3)
		}
		gaps = append(gaps, float64(t9.Sub(t0).Nanoseconds())/1e3)
	}
	if len(gaps)+len(popGaps) == 0 {
		return "", fmt.Errorf("no hand-off passed every hop (%d left out)", skipped)
	}
	var b strings.Builder
	table := func(title string, names []string, hops [][]float64, gaps []float64) {
		if len(gaps) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s, %d hand-offs:\n\n| step | p50 µs | p90 µs |\n|---|---|---|\n", title, len(gaps))
		for i, name := range names {
			fmt.Fprintf(&b, "| %s | %.1f | %.1f |\n", name, q(hops[i], 0.5), q(hops[i], 0.9))
		}
		fmt.Fprintf(&b, "| **gap (Unlock called → Lock returns)** | **%.1f** | **%.1f** |\n\n", q(gaps, 0.5), q(gaps, 0.9))
	}
	table("Popped (the waiter's BLPOP has the grant)", popNames, popped, popGaps)
	table("Woken by a message, then claimed", names, hops, gaps)
	fmt.Fprintf(&b, "%d hand-offs left out (woken otherwise, or the same Client twice)\n", skipped)
	return b.String(), nil
}

var popNames = []string{
	"Unlock called → release sent",
	"release sent → its write() returns",
	"write() → the waiter's pop reply read from the socket",
	"reply read → the pop's goroutine has it",
	"→ waiter goroutine running",
	"waiter running → Lock returns",
}

// popHops follows a hand-off that the waiter popped: nil when it was not.
func popHops(rel, rcv *clientTrace, t0, t9 time.Time) []time.Time {
	ts := []time.Time{t0}
	ts = append(ts, rel.first(notify.HopRelease, t0, t9))
	ts = append(ts, rel.first(evWrite, ts[1], t9))
	popped := rcv.last(notify.HopPopped, ts[2], t9)
	ts = append(ts, rcv.last(evRead, ts[2], popped))
	ts = append(ts, popped)
	ts = append(ts, rcv.first(notify.HopWake, ts[4], t9))
	ts = append(ts, t9)
	for i := 1; i < len(ts); i++ {
		if ts[i].IsZero() || ts[i].Before(ts[i-1]) {
			return nil
		}
	}
	return ts
}

// q is v's q-quantile (nearest rank below).
func q(v []float64, q float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[int(q*float64(len(s)-1))]
}

// pingRoundTrips measures PING's p50 in µs back to back (1000) and one
// every 10 ms (100), on a client of its own.
func pingRoundTrips(ctx context.Context, t *testing.T, addr string) (tight, idle float64) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	one := func() float64 {
		s := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		return float64(time.Since(s).Nanoseconds()) / 1e3
	}
	var a, b []float64
	for range 1000 {
		a = append(a, one())
	}
	for range 100 {
		time.Sleep(10 * time.Millisecond)
		b = append(b, one())
	}
	return q(a, 0.5), q(b, 0.5)
}
