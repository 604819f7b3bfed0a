package testenv

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// proxiedClient returns a go-redis client on addr that never retries (so a
// fault shows as the error it causes) and lets ctx bound every call.
func proxiedClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                     addr,
		MaxRetries:               -1,
		DialTimeout:              time.Second,
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pingTime returns how long one PING took.
func pingTime(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	start := time.Now()
	if err := c.Ping(ctxT(t, 10*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// Bytes go both ways through the proxy, commands and pushes alike, and the
// proxy counts its connections.
func TestProxyForwards(t *testing.T) {
	r := StartRedis(t)
	p := NewFaultProxy(t, r.Addr())
	c := proxiedClient(t, p.Addr())
	ctx := ctxT(t, 10*time.Second)
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Do(ctx, "GET", "k"); err != nil || v != "v" {
		t.Fatalf("GET directly = %v, %v; the SET did not go through", v, err)
	}
	big := string(make([]byte, 1<<20)) // more than one chunk each way
	if err := c.Set(ctx, "big", big, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "big").Result(); err != nil || v != big {
		t.Fatalf("GET of 1 MiB through the proxy: %d bytes, %v", len(v), err)
	}
	if p.Accepted() < 1 || p.Conns() < 1 {
		t.Fatalf("Accepted %d, Conns %d after traffic", p.Accepted(), p.Conns())
	}
	if p.Target() != r.Addr() {
		t.Fatalf("Target %s, want %s", p.Target(), r.Addr())
	}
}

// Latency toward the server delays every reply by at least that much; latency
// toward the client delays a push the server sends on its own (a pub/sub
// message) by at least that much. Each is a lower bound: the proxy cannot
// deliver earlier than it was told.
func TestProxyLatencyPerDirection(t *testing.T) {
	r := StartRedis(t)
	p := NewFaultProxy(t, r.Addr())
	c := proxiedClient(t, p.Addr())
	ctx := ctxT(t, 20*time.Second)
	pingTime(t, c) // warm the connection

	const up, down = 60 * time.Millisecond, 40 * time.Millisecond
	p.SetLatency(up, 0)
	for range 3 {
		if d := pingTime(t, c); d < up {
			t.Fatalf("PING took %v with %v toward the server", d, up)
		}
	}
	p.SetLatency(0, down)
	for range 3 {
		if d := pingTime(t, c); d < down {
			t.Fatalf("PING took %v with %v toward the client", d, down)
		}
	}
	p.SetLatency(up, down)
	if d := pingTime(t, c); d < up+down {
		t.Fatalf("PING took %v with %v + %v", d, up, down)
	}
	if a, b := p.Latency(); a != up || b != down {
		t.Fatalf("Latency() = %v, %v", a, b)
	}

	// Server -> client alone: a message published directly to the server
	// reaches a subscriber behind the proxy no sooner than down.
	p.SetLatency(0, down)
	sub := c.Subscribe(ctx, "ch")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	for range 3 {
		sent := time.Now()
		if _, err := r.Do(ctx, "PUBLISH", "ch", "x"); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.ReceiveMessage(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(sent); d < down {
			t.Fatalf("push arrived %v after PUBLISH with %v toward the client", d, down)
		}
	}
}

// A blackhole lets calls hang on open and on new connections (the proxy still
// accepts them), keeps connections open, and Heal delivers what was held: a
// SET sent into the blackhole lands after Heal.
func TestProxyBlackhole(t *testing.T) {
	r := StartRedis(t)
	p := NewFaultProxy(t, r.Addr())
	c := proxiedClient(t, p.Addr())
	pingTime(t, c)

	p.Blackhole()
	if !p.Blackholed() {
		t.Fatal("Blackholed() = false after Blackhole")
	}
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := c.Ping(short).Err()
	cancel()
	if err == nil {
		t.Fatal("PING answered through a blackhole")
	}
	accepted := p.Accepted()
	conn, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatalf("a blackholed proxy refused a connection: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("*3\r\n$3\r\nSET\r\n$4\r\nheld\r\n$1\r\n1\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := conn.Read(make([]byte, 16)); err == nil || n > 0 {
		t.Fatalf("read %d bytes, %v through a blackhole", n, err)
	}
	waitForT(t, "the new connection accepted", func() bool { return p.Accepted() > accepted })
	if v, err := r.Do(ctxT(t, 5*time.Second), "EXISTS", "held"); err != nil || v != int64(0) {
		t.Fatalf("EXISTS held = %v, %v: the SET went through the blackhole", v, err)
	}

	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 5)
	if _, err := conn.Read(buf); err != nil || string(buf) != "+OK\r\n" {
		t.Fatalf("after Heal the held SET answered %q, %v", buf, err)
	}
	pingTime(t, c)
}

// BlackholeOpen silences the connections open at the call, both ways, and
// keeps them open, while a connection opened after it works; Heal delivers
// what was held.
func TestProxyBlackholeOpen(t *testing.T) {
	r := StartRedis(t)
	p := NewFaultProxy(t, r.Addr())
	old, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	waitForT(t, "the first connection relayed", func() bool { return p.Conns() == 1 })

	p.BlackholeOpen()
	if p.Blackholed() {
		t.Fatal("Blackholed() = true after BlackholeOpen: new connections flow")
	}
	if _, err := old.Write([]byte("*3\r\n$3\r\nSET\r\n$4\r\nheld\r\n$1\r\n1\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = old.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := old.Read(make([]byte, 16)); err == nil || n > 0 {
		t.Fatalf("read %d bytes, %v on a held connection", n, err)
	}
	c := proxiedClient(t, p.Addr()) // dials after the hold: it flows
	pingTime(t, c)
	if v, err := r.Do(ctxT(t, 5*time.Second), "EXISTS", "held"); err != nil || v != int64(0) {
		t.Fatalf("EXISTS held = %v, %v: the held connection's SET went through", v, err)
	}
	if p.Conns() != 2 {
		t.Fatalf("Conns() = %d, want the held connection and the new one", p.Conns())
	}

	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	_ = old.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 5)
	if _, err := old.Read(buf); err != nil || string(buf) != "+OK\r\n" {
		t.Fatalf("after Heal the held SET answered %q, %v", buf, err)
	}
	pingTime(t, c)
}

// Reset breaks open connections with an RST: a call in flight fails, a raw connection reads ECONNRESET, and the next call
// dials a fresh connection that works.
func TestProxyReset(t *testing.T) {
	r := StartRedis(t)
	p := NewFaultProxy(t, r.Addr())
	c := proxiedClient(t, p.Addr())
	pingTime(t, c)
	raw, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	waitForT(t, "two connections", func() bool { return p.Conns() == 2 })

	// Hold a PING in flight (blackhole), then reset under it.
	p.Blackhole()
	got := make(chan error, 1)
	go func() { got <- c.Ping(ctxT(t, 10*time.Second)).Err() }()
	time.Sleep(50 * time.Millisecond)
	if n := p.Reset(); n != 2 {
		t.Fatalf("Reset reset %d connections, want 2", n)
	}
	if err := <-got; err == nil {
		t.Fatal("a PING in flight across a Reset succeeded") // go-redis reports EOF or ECONNRESET
	}
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("raw read after Reset: %v, want connection reset", err)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	pingTime(t, c) // a new connection
	if p.Conns() != 1 {
		t.Fatalf("Conns() = %d after the redial", p.Conns())
	}
}

// Refuse makes new connections fail with ECONNREFUSED while open ones carry
// on; Heal listens again on the same address.
func TestProxyRefuse(t *testing.T) {
	r := StartRedis(t)
	p := NewFaultProxy(t, r.Addr())
	c := proxiedClient(t, p.Addr())
	pingTime(t, c)
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	if err := p.Refuse(); err != nil {
		t.Fatalf("second Refuse: %v", err)
	}
	_, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v, want connection refused", err)
	}
	pingTime(t, c) // the pooled connection still works
	p.Reset()
	if err := c.Ping(ctxT(t, 5*time.Second)).Err(); err == nil {
		t.Fatal("PING after Refuse and Reset succeeded")
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	pingTime(t, c)
}

// Close resets what is open, refuses what comes, and ends every goroutine
// (goleak in TestMain checks); faults on a closed proxy fail.
func TestProxyClose(t *testing.T) {
	r := StartRedis(t)
	p, err := StartFaultProxy(r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := proxiedClient(t, p.Addr())
	p.Blackhole()
	go func() { _ = c.Ping(ctxT(t, 5*time.Second)).Err() }() // hangs in the blackhole
	waitForT(t, "the hanging connection", func() bool { return p.Conns() == 1 })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !refused(p.Addr()) {
		t.Fatal("a closed proxy accepts connections")
	}
	if err := p.Heal(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Heal after Close = %v", err)
	}
	if err := p.Refuse(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Refuse after Close = %v", err)
	}
}

// Faults switched at random while several goroutines send commands: no data
// race, no deadlock, and after Heal every goroutine's calls succeed again.
func TestProxyConcurrentFaults(t *testing.T) {
	r := StartRedis(t)
	p := NewFaultProxy(t, r.Addr())
	c := proxiedClient(t, p.Addr())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_ = c.Incr(ctx, "n").Err()
				cancel()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 60 {
		switch rng.IntN(5) {
		case 0:
			p.SetLatency(time.Duration(rng.IntN(20))*time.Millisecond, time.Duration(rng.IntN(20))*time.Millisecond)
		case 1:
			p.Blackhole()
		case 2:
			p.Reset()
		case 3:
			if err := p.Refuse(); err != nil {
				t.Error(err)
			}
		case 4:
			if err := p.Heal(); err != nil {
				t.Error(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	for range 5 {
		if err := c.Incr(ctxT(t, 10*time.Second), "n").Err(); err != nil {
			t.Fatalf("after Heal: %v", err)
		}
	}
}

// A silent server accepts connections and never answers: a call against it
// ends only with its context.
func TestProxySilentServer(t *testing.T) {
	s := NewSilentServer(t)
	c := proxiedClient(t, s.Addr())
	const d = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := c.Ping(ctx).Err()
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("PING against a silent server = %v, want a timeout", err)
	}
	if took := time.Since(start); took < d-10*time.Millisecond {
		t.Fatalf("PING failed after %v, before its %v context ended: %v", took, d, err)
	}
}

// waitForT polls cond for up to 10s.
func waitForT(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
