package shardsub

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// oneMaster is a fake topology: one master at addr serving every slot, in
// front of a plain redis-server, which runs SSUBSCRIBE and SPUBLISH as a
// Cluster 7 node does (without slot checks). The ClusterClient's slot map
// comes from ClusterSlots, and CLUSTER SHARDS, which a non-cluster server
// refuses, is answered by a hook without touching the network: only the
// Subscriber's own node connections reach addr.
type oneMaster struct {
	addr   string
	shards atomic.Int64 // CLUSTER SHARDS answered
}

func (h *oneMaster) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *oneMaster) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c, ok := cmd.(*redis.ClusterShardsCmd)
		if !ok {
			return next(ctx, cmd)
		}
		h.shards.Add(1)
		host, portStr, err := net.SplitHostPort(h.addr)
		if err != nil {
			return err
		}
		port, err := strconv.ParseInt(portStr, 10, 64)
		if err != nil {
			return err
		}
		c.SetVal([]redis.ClusterShard{{
			Slots: []redis.SlotRange{{Start: 0, End: testenv.ClusterSlots - 1}},
			Nodes: []redis.Node{{ID: "fake", Endpoint: host, IP: host, Port: port, Role: "master", Health: "online"}},
		}})
		return nil
	}
}

func (h *oneMaster) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// oneMasterClient returns a ClusterClient whose only master is addr, and
// its hook; it is closed in t.Cleanup.
func oneMasterClient(t *testing.T, addr string) (*redis.ClusterClient, *oneMaster) {
	t.Helper()
	h := &oneMaster{addr: addr}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{addr},
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: testenv.ClusterSlots - 1, Nodes: []redis.ClusterNode{{Addr: addr}}}}, nil
		},
		DialTimeout:              time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	cc.AddHook(h)
	t.Cleanup(func() { _ = cc.Close() })
	return cc, h
}

// spublish SPUBLISHes payload on channel on the server itself (not through
// the proxy) and waits for rec to receive it.
func spublish(t *testing.T, srv *testenv.Redis, rec *recorder, channel, payload string) {
	t.Helper()
	mark := rec.mark()
	if _, err := srv.Do(context.Background(), "SPUBLISH", channel, payload); err != nil {
		t.Fatalf("SPUBLISH %s: %v", channel, err)
	}
	rec.wait(t, mark, "message "+payload+" on "+channel, msg(channel, payload))
}

// A node connection that goes silent without being closed (its peer
// vanished: no FIN, no RST; a new connection would work) is found dead by
// the PING of the health check, dropped, dialed again and its channels
// subscribed again, within a few ping intervals: every channel hears
// Resubscribed, and what is published from then on arrives. An idle but
// healthy connection is kept: its PINGs are answered, nothing is redialed.
func TestSilentConnection(t *testing.T) {
	const interval = 200 * time.Millisecond
	srv := testenv.StartRedis(t)
	p := testenv.NewFaultProxy(t, srv.Addr())
	cc, topo := oneMasterClient(t, p.Addr())
	rec := newRecorder()
	s := New(cc, Config{
		Handler:      rec.handle,
		Log:          slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		PingInterval: interval,
		PingTimeout:  interval,
	})
	t.Cleanup(func() { _ = s.Close() })

	// Two slots: resubscribed by two SSUBSCRIBEs on the new connection.
	a, b := "silent-a", "silent-b"
	if keys.Slot(a) == keys.Slot(b) {
		t.Fatalf("%s and %s share a slot", a, b)
	}
	if err := s.Subscribe(a, b); err != nil {
		t.Fatal(err)
	}
	rec.waitSubscribed(t, 0, a, b)
	spublish(t, srv, rec, a, "before")
	if n := p.Accepted(); n != 1 {
		t.Fatalf("%d connections through the proxy after subscribing, want 1 (the node's)", n)
	}

	// Idle and alive: the PINGs are answered, nothing is dropped or
	// redialed.
	ctx := context.Background()
	if err := srv.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	mark := rec.mark()
	time.Sleep(8 * interval)
	stats, err := srv.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pings := stats["ping"]
	t.Logf("idle healthy connection: %d PINGs answered in %v (ping interval %v), %d connections dialed", pings, 8*interval, interval, p.Accepted()-1)
	if pings < 3 {
		t.Fatalf("%d PINGs in %v with a ping interval of %v: the health check is not running", pings, 8*interval, interval)
	}
	if n := p.Accepted(); n != 1 {
		t.Fatalf("%d connections dialed while the node connection was idle and alive", n-1)
	}
	if n := rec.count(mark, func(ev Event) bool { return ev.Kind != Message }); n != 0 {
		t.Fatalf("%d subscription events while the connection was idle and alive", n)
	}
	spublish(t, srv, rec, b, "idle")

	// The open connection goes silent; a new one works.
	mark = rec.mark()
	reads := topo.shards.Load()
	p.BlackholeOpen()
	start := time.Now()
	rec.wait(t, mark, "Resubscribed "+a, is(Resubscribed, a))
	rec.wait(t, mark, "Resubscribed "+b, is(Resubscribed, b))
	took := time.Since(start)
	t.Logf("silent connection: both channels resubscribed %v after it went silent (ping interval and timeout %v), %d connection(s) dialed, %d slot map read(s)",
		took, interval, p.Accepted()-1, topo.shards.Load()-reads)
	// PingInterval of silence, then PingTimeout for the answer, then a
	// slot map read and SSUBSCRIBE on a new connection after MinBackoff:
	// about 2 intervals; 5 leave room for a loaded machine.
	if took > 5*interval {
		t.Fatalf("resubscribed %v after the connection went silent, want within %v", took, 5*interval)
	}
	if n := p.Accepted(); n != 2 {
		t.Fatalf("%d connections through the proxy, want 2 (the silent one and its replacement)", n)
	}
	if n := len(s.Nodes()); n != 1 {
		t.Fatalf("Nodes() = %v, want one", s.Nodes())
	}
	spublish(t, srv, rec, a, "after silence a")
	spublish(t, srv, rec, b, "after silence b")
	// Each message once: the silent connection's are not delivered.
	for _, ch := range []string{a, b} {
		if n := rec.count(mark, func(ev Event) bool { return ev.Kind == Message && ev.Channel == ch }); n != 1 {
			t.Fatalf("%d messages on %s since the connection went silent, want 1", n, ch)
		}
	}

	// The replacement is kept while idle and alive, even once the silent
	// connection's held bytes are delivered.
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	mark = rec.mark()
	time.Sleep(6 * interval)
	if n := p.Accepted(); n != 2 {
		t.Fatalf("%d connections dialed after the replacement, while it was idle and alive", n-2)
	}
	if n := rec.count(mark, func(ev Event) bool { return ev.Kind != Message }); n != 0 {
		t.Fatalf("%d subscription events while the replacement was idle and alive", n)
	}
	spublish(t, srv, rec, a, "healed")
}
