package shardsub

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// n200 is how many messages BusMessages publishes per measure.
const n200 = 200

// logWriter sends slog output to t.Log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func newSubscriber(t *testing.T, cc *redis.ClusterClient, r *recorder) *Subscriber {
	t.Helper()
	s := New(cc, Config{
		Handler:      r.handle,
		Log:          slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		PingInterval: 300 * time.Millisecond,
	})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestCluster runs against one Cluster 7 of 3 masters and 3 replicas, in
// order, each subtest changing the cluster for the next: channels are
// chosen by where their slots are now.
func TestCluster(t *testing.T) {
	c := testenv.StartCluster(t, 3)
	masters := c.Nodes()
	var replicas []*testenv.Redis
	for _, m := range masters {
		replicas = append(replicas, c.AddReplica(t, m))
	}
	all := append(slices.Clone(masters), replicas...)
	cc := c.NewClient(t)
	ctx := context.Background()

	t.Run("Delivery", func(t *testing.T) {
		r := newRecorder()
		s := newSubscriber(t, cc, r)
		own := owners(t, masters[0])
		a1 := channelOn(t, own, masters[0].Addr(), "a")
		a2 := channelOn(t, own, masters[0].Addr(), "a", a1)  // another slot, same master
		tagged := []string{"{" + a1 + "}x", "{" + a1 + "}y"} // a1's slot
		b := channelOn(t, own, masters[1].Addr(), "b")
		d := channelOn(t, own, masters[2].Addr(), "d")
		chans := append([]string{a1, a2, b, d}, tagged...)
		if err := s.Subscribe(chans...); err != nil {
			t.Fatal(err)
		}
		r.waitSubscribed(t, 0, chans...)
		for _, ch := range chans {
			if !s.Subscribed(ch) {
				t.Fatalf("%s confirmed but Subscribed says no", ch)
			}
			if n := r.count(0, is(Subscribed, ch)); n != 1 {
				t.Fatalf("%d Subscribed events for %s, want 1", n, ch)
			}
			publish(t, cc, r, ch, "hello "+ch)
		}
		// One connection per master in use, none to replicas.
		for _, m := range masters {
			if n := pubsubClients(t, m); n != 1 {
				t.Fatalf("master %s has %d pub/sub connections, want 1", m.Addr(), n)
			}
		}
		for _, rep := range replicas {
			if n := pubsubClients(t, rep); n != 0 {
				t.Fatalf("replica %s has %d pub/sub connections, want 0", rep.Addr(), n)
			}
		}
		if n := len(s.Nodes()); n != 3 {
			t.Fatalf("Nodes() = %v, want 3", s.Nodes())
		}

		// Unsubscribing d, the only channel on master 2, unsubscribes it
		// there and closes the connection once unused.
		s.Unsubscribe(d)
		if err := waitCond(func() bool { return pubsubClients(t, masters[2]) == 0 }); err != nil {
			t.Fatalf("master 2's connection is not closed after its last channel left: %v", err)
		}
		if s.Subscribed(d) {
			t.Fatal("d still subscribed")
		}
		// The others are untouched.
		publish(t, cc, r, a1, "still here")
		if n := r.count(0, func(ev Event) bool { return ev.Kind == Resubscribed }); n != 0 {
			t.Fatalf("%d Resubscribed events without any change in the cluster", n)
		}

		// go-redis' own sharded subscriptions, for the record (package
		// doc): several slots in one SSubscribe are refused with
		// CROSSSLOT, and a later SSubscribe on one PubSub of a channel
		// whose slot lives on another master is answered MOVED: a
		// ClusterClient PubSub serves one master only.
		gps := cc.SSubscribe(ctx, a1, b)
		defer gps.Close()
		if _, err := gps.ReceiveTimeout(ctx, waitTimeout); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
			t.Fatalf("go-redis SSubscribe of two slots: got %v, want CROSSSLOT", err)
		}
		gps2 := cc.SSubscribe(ctx, a1)
		defer gps2.Close()
		if _, err := gps2.ReceiveTimeout(ctx, waitTimeout); err != nil {
			t.Fatal(err)
		}
		_ = gps2.SSubscribe(ctx, b)
		if _, err := gps2.ReceiveTimeout(ctx, waitTimeout); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
			t.Fatalf("go-redis SSubscribe of a channel on another master: got %v, want MOVED", err)
		}
	})

	t.Run("BusMessages", func(t *testing.T) {
		// Nothing but these publishes on the cluster bus's publish
		// counters while they run.
		const n = n200
		sum := func(field string) int64 {
			var total int64
			for _, node := range all {
				total += clusterInfo(t, node)[field]
			}
			return total
		}
		fields := []string{
			"cluster_stats_messages_publish_sent", "cluster_stats_messages_publish_received",
			"cluster_stats_messages_publishshard_sent", "cluster_stats_messages_publishshard_received",
		}
		snap := func() map[string]int64 {
			out := make(map[string]int64)
			for _, f := range fields {
				out[f] = sum(f)
			}
			return out
		}
		// settle waits until the bus has delivered every publish message
		// sent (each is counted as received on arrival), and returns the
		// counters then.
		settle := func() map[string]int64 {
			var now map[string]int64
			err := waitCond(func() bool {
				now = snap()
				return now["cluster_stats_messages_publish_sent"] == now["cluster_stats_messages_publish_received"] &&
					now["cluster_stats_messages_publishshard_sent"] == now["cluster_stats_messages_publishshard_received"]
			})
			if err != nil {
				t.Fatalf("bus publish messages sent and received do not match: %v", now)
			}
			return now
		}
		measure := func(publish func(i int) error) map[string]float64 {
			before := settle()
			for i := 0; i < n; i++ {
				if err := publish(i); err != nil {
					t.Fatal(err)
				}
			}
			after := settle()
			per := make(map[string]float64)
			for _, f := range fields {
				per[f] = float64(after[f]-before[f]) / n
			}
			return per
		}
		// Measured with our Subscriber on the channel's master and with
		// nobody subscribed: the cost does not depend on subscribers.
		r := newRecorder()
		s := newSubscriber(t, cc, r)
		const heard, unheard = "dlock-bus-test", "dlock-bus-test-nobody"
		if err := s.Subscribe(heard); err != nil {
			t.Fatal(err)
		}
		r.waitSubscribed(t, 0, heard)
		classic := measure(func(i int) error { return cc.Publish(ctx, heard, "0").Err() })
		// SPUBLISH straight to the slot's master, as a script run there
		// would.
		own := owners(t, masters[0])
		spublish := func(channel string) func(int) error {
			master := byAddr(t, all, own[keys.Slot(channel)])
			return func(int) error {
				_, err := master.Do(ctx, "SPUBLISH", channel, "0")
				return err
			}
		}
		sharded := measure(spublish(heard))
		shardedNobody := measure(spublish(unheard))
		t.Logf("bus messages per classic PUBLISH on %d nodes: %v", len(all), classic)
		t.Logf("bus messages per SPUBLISH, subscriber on the master, one replica: %v", sharded)
		t.Logf("bus messages per SPUBLISH, no subscriber: %v", shardedNobody)
		// Classic and shard channels are apart: only the SPUBLISHes are
		// heard.
		if n := r.count(0, msg(heard, "0")); n != n200 {
			t.Fatalf("the subscriber heard %d messages, want %d", n, n200)
		}
		want := float64(len(all) - 1)
		if got := classic["cluster_stats_messages_publish_sent"]; got < want*0.95 || got > want*1.05 {
			t.Fatalf("a classic PUBLISH cost %.2f bus messages, want about %v (every other node)", got, want)
		}
		for _, per := range []map[string]float64{sharded, shardedNobody} {
			if got := per["cluster_stats_messages_publish_sent"]; got != 0 {
				t.Fatalf("SPUBLISH sent %.2f classic publish messages per call, want 0", got)
			}
		}
		if got := sharded["cluster_stats_messages_publishshard_sent"]; got < 0.95 || got > 1.05 {
			t.Fatalf("an SPUBLISH cost %.2f bus messages, want 1 (its shard's one replica)", got)
		}
		// Nobody subscribed: at most the shard's replica hears it (Redis
		// 7.0 was seen sending fewer, never more).
		if got := shardedNobody["cluster_stats_messages_publishshard_sent"]; got > 1.05 {
			t.Fatalf("an SPUBLISH nobody hears cost %.2f bus messages, want at most 1", got)
		}
	})

	t.Run("KilledConnection", func(t *testing.T) {
		r := newRecorder()
		s := newSubscriber(t, cc, r)
		own := owners(t, masters[0])
		a1 := channelOn(t, own, masters[0].Addr(), "k")
		a2 := channelOn(t, own, masters[0].Addr(), "k", a1)
		b := channelOn(t, own, masters[1].Addr(), "k")
		if err := s.Subscribe(a1, a2, b); err != nil {
			t.Fatal(err)
		}
		r.waitSubscribed(t, 0, a1, a2, b)
		// go-redis alongside, with a1 and a2 subscribed by two calls
		// (one would be refused with CROSSSLOT).
		gps := cc.SSubscribe(ctx, a1)
		defer gps.Close()
		_ = gps.SSubscribe(ctx, a2)
		for i := 0; i < 2; i++ {
			if _, err := gps.ReceiveTimeout(ctx, waitTimeout); err != nil {
				t.Fatal(err)
			}
		}

		mark := r.mark()
		if _, err := masters[0].Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			t.Fatal(err)
		}
		r.wait(t, mark, "Resubscribed "+a1, is(Resubscribed, a1))
		r.wait(t, mark, "Resubscribed "+a2, is(Resubscribed, a2))
		publish(t, cc, r, a1, "after kill 1")
		publish(t, cc, r, a2, "after kill 2")
		if n := r.count(mark, is(Resubscribed, b)); n != 0 {
			t.Fatalf("%s, on another master, was resubscribed", b)
		}

		// go-redis: the connection error, then its reconnection's single
		// SSUBSCRIBE a1 a2 refused with CROSSSLOT; neither channel is
		// subscribed again.
		var errs []string
		for i := 0; i < 2; i++ {
			_, err := gps.ReceiveTimeout(ctx, waitTimeout)
			errs = append(errs, err.Error())
		}
		if !strings.HasPrefix(errs[1], "CROSSSLOT") {
			t.Fatalf("go-redis after a killed connection: %q, want a connection error then CROSSSLOT", errs)
		}
		if n := shardNumSub(t, masters[0], a1); n != 1 {
			t.Fatalf("%s has %d subscribers, want 1 (ours; go-redis' is lost)", a1, n)
		}
	})

	t.Run("Migration", func(t *testing.T) {
		r := newRecorder()
		s := newSubscriber(t, cc, r)
		own := owners(t, masters[0])
		moving := channelOn(t, own, masters[0].Addr(), "m")
		staying := channelOn(t, own, masters[0].Addr(), "m", moving)
		if err := s.Subscribe(moving, staying); err != nil {
			t.Fatal(err)
		}
		r.waitSubscribed(t, 0, moving, staying)
		gps := cc.SSubscribe(ctx, moving)
		defer gps.Close()
		if _, err := gps.ReceiveTimeout(ctx, waitTimeout); err != nil {
			t.Fatal(err)
		}

		mark := r.mark()
		if err := c.MigrateSlot(ctx, int(keys.Slot(moving)), masters[0], masters[1]); err != nil {
			t.Fatal(err)
		}
		r.wait(t, mark, "Resubscribed "+moving, is(Resubscribed, moving))
		if n := shardNumSub(t, masters[1], moving); n < 1 {
			t.Fatalf("%s is not subscribed on its new master", moving)
		}
		publish(t, cc, r, moving, "after migration")
		publish(t, cc, r, staying, "after migration")
		if n := r.count(mark, is(Resubscribed, staying)); n != 0 {
			t.Fatalf("%s, whose slot stayed, was resubscribed", staying)
		}

		// go-redis: the server's sunsubscribe is handed to the caller as
		// a Subscription, and nothing is subscribed again.
		m, err := gps.ReceiveTimeout(ctx, waitTimeout)
		if sub, ok := m.(*redis.Subscription); err != nil || !ok || sub.Kind != "sunsubscribe" {
			t.Fatalf("go-redis after a migration: %v %v, want the sunsubscribe push", m, err)
		}
		if n := shardNumSub(t, masters[1], moving); n != 1 {
			t.Fatalf("%s has %d subscribers on its new master, want 1 (ours; go-redis' is lost)", moving, n)
		}
	})

	t.Run("Failover", func(t *testing.T) {
		r := newRecorder()
		s := newSubscriber(t, cc, r)
		own := owners(t, masters[2])
		old := masters[2]
		a1 := channelOn(t, own, old.Addr(), "f")
		a2 := channelOn(t, own, old.Addr(), "f", a1)
		b := channelOn(t, own, masters[1].Addr(), "f")
		if err := s.Subscribe(a1, a2, b); err != nil {
			t.Fatal(err)
		}
		r.waitSubscribed(t, 0, a1, a2, b)
		gps := cc.SSubscribe(ctx, a1)
		defer gps.Close()
		if _, err := gps.ReceiveTimeout(ctx, waitTimeout); err != nil {
			t.Fatal(err)
		}

		mark := r.mark()
		promoted := replicas[2]
		// A manual failover the servers give up on (the replica did not
		// catch up in time, on a loaded machine) is asked for again.
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			err = c.Failover(fctx, promoted)
			cancel()
			if err == nil {
				break
			}
			t.Logf("failover attempt %d: %v", attempt+1, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		r.wait(t, mark, "Resubscribed "+a1, is(Resubscribed, a1))
		r.wait(t, mark, "Resubscribed "+a2, is(Resubscribed, a2))
		// Subscribed again in the shard: on the new master, or on the old
		// one (a replica now, which hears the shard's messages as well)
		// when the resubscription reached it before it learned its demotion.
		for _, ch := range []string{a1, a2} {
			if n := shardNumSub(t, promoted, ch) + shardNumSub(t, old, ch); n != 1 {
				t.Fatalf("%s has %d subscribers in its shard, want 1", ch, n)
			}
		}
		publish(t, cc, r, a1, "after failover 1")
		publish(t, cc, r, a2, "after failover 2")
		publish(t, cc, r, b, "after failover 3")
		if n := r.count(mark, is(Resubscribed, b)); n != 0 {
			t.Fatalf("%s, on another master, was resubscribed", b)
		}
		// The connection to the demoted master is closed once unused.
		if err := waitCond(func() bool { return !slices.Contains(s.Nodes(), old.Addr()) }); err != nil {
			t.Fatalf("still connected to the demoted master: %v", s.Nodes())
		}

		// go-redis: the demoted master's sunsubscribe, and nothing more.
		m, err := gps.ReceiveTimeout(ctx, waitTimeout)
		if sub, ok := m.(*redis.Subscription); err != nil || !ok || sub.Kind != "sunsubscribe" {
			t.Fatalf("go-redis after a failover: %v %v, want the sunsubscribe push", m, err)
		}
	})

	t.Run("Close", func(t *testing.T) {
		// A cluster client of its own, closed before looking for leaks.
		cc := c.NewClient(t)
		before := make(map[string]int)
		for _, n := range all {
			before[n.Addr()] = pubsubClients(t, n)
		}
		r := newRecorder()
		ignore := goleak.IgnoreCurrent()
		s := New(cc, Config{Handler: r.handle})
		own := owners(t, masters[0])
		var chans []string
		for addr := range map[string]bool{masters[0].Addr(): true, masters[1].Addr(): true, replicas[2].Addr(): true} {
			chans = append(chans, channelOn(t, own, addr, "c"))
		}
		if err := s.Subscribe(chans...); err != nil {
			t.Fatal(err)
		}
		r.waitSubscribed(t, 0, chans...)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Subscribe("late"); err != ErrClosed {
			t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
		}
		mark := r.mark()
		_ = cc.SPublish(ctx, chans[0], "after close").Err()
		for _, n := range all {
			if got := pubsubClients(t, n); got != before[n.Addr()] {
				t.Fatalf("node %s has %d pub/sub connections after Close, want %d", n.Addr(), got, before[n.Addr()])
			}
		}
		if n := r.mark() - mark; n != 0 {
			t.Fatalf("%d events after Close", n)
		}
		_ = cc.Close()
		if err := goleak.Find(ignore); err != nil {
			t.Fatal(err)
		}
	})
}

// waitCond polls cond every 20ms for waitTimeout.
func waitCond(cond func() bool) error {
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
