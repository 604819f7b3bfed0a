package notify

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func waitEvent(t *testing.T, w *Waiter) Event {
	t.Helper()
	select {
	case <-w.C:
		return w.Take()
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
		return Event{}
	}
}

func TestHub(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx := context.Background()
	h := New(rdb, Config{ClientChannel: "dlock:client:test", Linger: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	defer h.Close()
	if clientReady(h) || h.Listening("lockchan", "k") {
		t.Fatal("ready or listening before any Join")
	}
	w1, err := h.Join(ctx, "lockchan", "k")
	if err != nil {
		t.Fatal(err)
	}
	w2, _ := h.Join(ctx, "lockchan", "k")
	if !clientReady(h) || !h.Listening("lockchan", "k") {
		t.Fatal("not ready or not listening after Join returned")
	}
	if h.Listening("otherchan", "k") {
		t.Fatal("listening on a channel nobody joined")
	}
	if n := rdb.PubSubNumSub(ctx, "lockchan").Val()["lockchan"]; n != 1 {
		t.Fatalf("lockchan has %d subscribers, want 1 for two waiters", n)
	}

	// A hand-off wakes exactly its ticket, to try again: a message never
	// grants.
	rdb.Publish(ctx, "dlock:client:test", strconv.FormatUint(w2.Ticket, 10)+" 12345678901234567 2000")
	if ev := waitEvent(t, w2); !ev.Retry || !ev.Handoff {
		t.Fatalf("w2 event %+v, want a retry marked as a hand-off's", ev)
	}
	select {
	case <-w1.C:
		t.Fatal("a hand-off to w2 woke w1")
	case <-time.After(50 * time.Millisecond):
	}
	// "0" wakes one waiter, "1" all of them.
	rdb.Publish(ctx, "lockchan", "0")
	if ev := waitEvent(t, w1); !ev.Retry || ev.Handoff {
		t.Fatalf("w1 event %+v, want a retry that is not a hand-off's", ev)
	}
	select {
	case <-w2.C:
		t.Fatal("a single release woke two waiters")
	case <-time.After(100 * time.Millisecond):
	}
	// "1" wakes every waiter only where readers wait; here, as "0", one.
	rdb.Publish(ctx, "lockchan", "1")
	waitEvent(t, w1)
	select {
	case <-w2.C:
		t.Fatal("a \"1\" on a channel without readers woke two waiters")
	case <-time.After(100 * time.Millisecond):
	}

	h.Leave(w1)
	h.Leave(w2)
	h.Leave(w2) // idempotent
	if !h.Listening("lockchan", "k") {
		t.Fatal("not listening during the linger")
	}
	deadline := time.Now().Add(5 * time.Second)
	for rdb.PubSubNumSub(ctx, "lockchan").Val()["lockchan"] != 0 {
		if time.Now().After(deadline) {
			t.Fatal("lock channel still subscribed after the linger")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h.Listening("lockchan", "k") {
		t.Fatal("listening after the linger")
	}

	// After the connection is killed, the waiters are told to re-check once
	// the subscription is back.
	w3, _ := h.Join(ctx, "lockchan", "k")
	if _, err := r.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, w3); !ev.Retry {
		t.Fatalf("w3 event after reconnect %+v", ev)
	}
	h.Leave(w3)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Join(ctx, "x", "k"); err != ErrClosed {
		t.Fatalf("Join after Close = %v", err)
	}
}

// On a read-write channel, "0" wakes one exclusive waiter (a writer) when
// there is one, else every shared waiter (the readers); "1" wakes all.
func TestHubShared(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx := context.Background()
	h := New(rdb, Config{ClientChannel: "dlock:client:shared", Linger: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	defer h.Close()
	r1, err := h.JoinShared(ctx, "rw", "k")
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := h.JoinShared(ctx, "rw", "k")
	w, _ := h.Join(ctx, "rw", "k")
	quiet := func(ws ...*Waiter) {
		t.Helper()
		time.Sleep(50 * time.Millisecond)
		for _, x := range ws {
			select {
			case <-x.C:
				t.Fatalf("waiter %d woken", x.Ticket)
			default:
			}
		}
	}
	rdb.Publish(ctx, "rw", "0")
	if ev := waitEvent(t, w); !ev.Retry {
		t.Fatalf("writer event %+v", ev)
	}
	quiet(r1, r2)
	h.Leave(w)
	// Without a writer, "0" lets every reader through: one, the scout,
	// tries first, and the other once the scout got through.
	rdb.Publish(ctx, "rw", "0")
	waitEvent(t, r1)
	quiet(r2)
	h.Tried(r1, true)
	waitEvent(t, r2)
	h.Leave(r1)
	h.Leave(r2)
}

// A JoinAll waiter is woken by every message on its channel, whatever it
// says, and by its channel's first confirmation; the other waiters of the
// channel are not woken by either beyond what Join promises.
func TestHubJoinAll(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx := context.Background()
	h := New(rdb, Config{ClientChannel: "dlock:client:all", Linger: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	defer h.Close()
	warm, err := h.Join(ctx, "warm", "k") // the client channel is confirmed from now on
	if err != nil {
		t.Fatal(err)
	}
	defer h.Leave(warm)
	a1, err := h.JoinAll(ctx, "latch")
	if err != nil {
		t.Fatal(err)
	}
	e, _ := h.Join(ctx, "latch", "k")
	// JoinAll returned before "latch" was confirmed: its confirmation wakes
	// a1, which may have missed a message until then.
	if ev := waitEvent(t, a1); !ev.Retry {
		t.Fatalf("a1 event %+v at the confirmation", ev)
	}
	quiet := func(ws ...*Waiter) {
		t.Helper()
		time.Sleep(50 * time.Millisecond)
		for _, x := range ws {
			select {
			case <-x.C:
				t.Fatalf("waiter %d woken", x.Ticket)
			default:
			}
		}
	}
	quiet(e)
	a2, _ := h.JoinAll(ctx, "latch")
	quiet(a2) // already confirmed: nothing to wake it for
	// Every message reaches the JoinAll waiters: a1 first, as the scout,
	// and a2 once a1 found the message true.
	rdb.Publish(ctx, "latch", "0")
	waitEvent(t, a1)
	waitEvent(t, e) // "0" still wakes one exclusive waiter
	quiet(a2)
	h.Tried(a1, true)
	waitEvent(t, a2)
	rdb.Publish(ctx, "latch", "anything")
	waitEvent(t, a1)
	h.Tried(a1, true)
	waitEvent(t, a2)
	quiet(e)
	for _, w := range []*Waiter{a1, a2, e} {
		h.Leave(w)
	}
}

// clientReady reports whether the client channel is confirmed.
func clientReady(h *Hub) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clientOK
}

// A Join still waiting for its subscription to be confirmed returns
// ErrClosed when the hub closes: the confirmation never comes after Close,
// and the waiter must not sit out the ready timeout (a minute here) first.
func TestJoinEndsAtClose(t *testing.T) {
	silent := testenv.NewSilentServer(t)
	// Short timeouts: the hub's goroutines stuck on the silent server end
	// soon after Close (goleak).
	rdb := redis.NewClient(&redis.Options{Addr: silent.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	h := New(rdb, Config{ClientChannel: "dlock:client:test", ReadyTimeout: time.Minute, CloseWait: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	joined := make(chan error, 1)
	go func() {
		w, err := h.JoinAll(ctx, "latchchan")
		if err == nil {
			h.Leave(w)
		}
		joined <- err
	}()
	// Let it get as far as waiting for the confirmation.
	for {
		h.mu.Lock()
		n := len(h.tickets)
		h.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = h.Close()
	if err := <-joined; !errors.Is(err, ErrClosed) {
		t.Fatalf("JoinAll when the hub closed: %v, want ErrClosed (not the ctx's end)", err)
	}
}

// healthHub returns a Hub whose pub/sub connection goes through a fault
// proxy in front of a new redis-server, with a health interval of
// interval, and a waiter joined on it (the client channel confirmed).
func healthHub(t *testing.T, interval time.Duration, log *slog.Logger) (*testenv.Redis, *testenv.FaultProxy, *Hub, *Waiter) {
	t.Helper()
	r := testenv.StartRedis(t)
	p := testenv.NewFaultProxy(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{
		Addr:                     p.Addr(),
		DialTimeout:              time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	h := New(rdb, Config{ClientChannel: healthClient, HealthInterval: interval, CloseWait: time.Second, Log: log})
	t.Cleanup(func() { _ = h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := h.Join(ctx, "lockchan", "k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Leave(w) })
	return r, p, h, w
}

const healthClient = "dlock:client:health"

// heardWithin publishes a hand-off to w on r's client channel every
// quarter interval until w hears one, and returns when w was first woken
// for something else (0: never) and when it heard the hand-off, measured
// from start; it fails the test after giveUp.
func heardWithin(t *testing.T, r *testenv.Redis, w *Waiter, start time.Time, interval, giveUp time.Duration) (woken, heard time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), giveUp+10*time.Second)
	defer cancel()
	handoff := strconv.FormatUint(w.Ticket, 10) + " 12345678901234567 2000"
	tick := time.NewTicker(interval / 4)
	defer tick.Stop()
	end := time.NewTimer(giveUp - time.Since(start))
	defer end.Stop()
	for {
		select {
		case <-w.C:
			ev := w.Take()
			if ev.Handoff {
				return woken, time.Since(start)
			}
			if ev.Retry && woken == 0 {
				woken = time.Since(start)
			}
		case <-tick.C:
			if _, err := r.Do(ctx, "PUBLISH", healthClient, handoff); err != nil {
				t.Fatal(err)
			}
		case <-end.C:
			t.Fatalf("no hand-off heard %v after start (health interval %v)", time.Since(start), interval)
		}
	}
}

// A pub/sub connection that goes silent without being closed (its peer
// vanished: no FIN, no RST) is found dead by the reader's health check
// within two intervals, dropped and redialed: the waiters are told to
// re-check, and what is published from then on reaches them. An idle
// connection that answers its PINGs is kept.
func TestHubHealthCheck(t *testing.T) {
	const interval = 200 * time.Millisecond
	r, p, _, w := healthHub(t, interval, slog.New(slog.DiscardHandler))

	// Idle and alive: PINGs are answered, nothing is redialed or woken.
	accepted := p.Accepted()
	time.Sleep(6 * interval)
	if n := p.Accepted(); n != accepted {
		t.Fatalf("%d connections dialed while the pub/sub connection was idle and alive", n-accepted)
	}
	select {
	case <-w.C:
		t.Fatalf("waiter woken (%+v) while the connection was idle and alive", w.Take())
	default:
	}

	// The open connection goes silent; a new one would work. Hand-offs
	// are published on the server itself until the waiter hears one.
	p.BlackholeOpen()
	start := time.Now()
	woken, heard := heardWithin(t, r, w, start, interval, 25*interval)
	t.Logf("silent connection: re-check at the reconnect after %v (0: with the hand-off), hand-off heard after %v (health interval %v)", woken, heard, interval)
	if heard > 10*interval {
		t.Fatalf("hand-off heard %v after the connection went silent, want within %v", heard, 10*interval)
	}
	if p.Accepted() == accepted {
		t.Fatal("hand-off heard without a new connection")
	}
}

// A server in a slow script answers the health check's PING with BUSY:
// that is an answer, and the connection is kept, without a warning.
func TestHubHealthBusy(t *testing.T) {
	const interval = 200 * time.Millisecond
	var buf testenv.Buffer
	r, p, _, w := healthHub(t, interval, slog.New(slog.NewTextHandler(&buf, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.Do(ctx, "CONFIG", "SET", "busy-reply-threshold", "50"); err != nil {
		t.Fatal(err)
	}
	accepted := p.Accepted()
	script := make(chan error, 1)
	go func() {
		_, err := r.Do(ctx, "EVAL", "while true do end", "0")
		script <- err
	}()
	time.Sleep(6 * interval)
	if _, err := r.Do(ctx, "SCRIPT", "KILL"); err != nil {
		t.Fatal(err)
	}
	if err := <-script; err == nil {
		t.Fatal("the busy script ended without an error after SCRIPT KILL")
	}
	start := time.Now()
	woken, heard := heardWithin(t, r, w, start, interval, 25*interval)
	if woken != 0 {
		t.Fatalf("waiter woken %v before the hand-off (at %v): the connection was taken for lost", woken, heard)
	}
	if n := p.Accepted(); n != accepted {
		t.Fatalf("%d connections dialed while the server was busy", n-accepted)
	}
	if log := buf.String(); strings.Contains(log, "WARN") {
		t.Fatalf("warned while the server was busy:\n%s", log)
	}
}
