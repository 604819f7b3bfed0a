package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// TestShardedChannelsInKeySlot: in sharded pub/sub mode every message a
// script sends must be an SPUBLISH on a channel of the script's own
// Cluster slot, or Redis refuses it (and the scripts' pcall hides the
// refusal). Redisson's channel of a lock named with an unclosed '{' ("a{b")
// and of a latch named with a hash tag ("{t}x") hash elsewhere; sharded
// mode must use keys.ShardChannel's stand-in for them.
//
// No wall-clock bound is asserted. The waiters re-check only once an hour
// and the holders' leases last an hour, so within the test's 20s context
// only the message can let a waiter through; the lock cases subscribe to
// the very channel the handle's waiters listen on and must receive the
// release's "0".
func TestShardedChannelsInKeySlot(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	rdb := cl.NewClient(t)
	for _, ns := range []string{"", "ns"} {
		opts := []Option{withRecheck(time.Hour)}
		if ns != "" {
			opts = append(opts, WithNamespace(ns))
		}
		holder := newClientOn(t, rdb, opts...)
		waiter := newClientOn(t, rdb, opts...)
		prefix := "plain/"
		if ns != "" {
			prefix = "namespaced/"
		}

		for _, name := range []string{"a{b", "{", "x{y:z", "{t}x", "plain"} {
			t.Run(prefix+"MutexReleaseHeard/"+name, func(t *testing.T) {
				for _, m := range []*Mutex{holder.Mutex(name), &holder.FairMutex(name).Mutex} {
					released(t, rdb, chanOf(m), func(ctx context.Context) {
						if ok, err := m.TryLock(ctx, 0, time.Hour); err != nil || !ok {
							t.Fatalf("TryLock %q: %v, %v", name, ok, err)
						}
						if err := m.Unlock(ctx); err != nil {
							t.Fatal(err)
						}
					}, "0")
				}
			})

			t.Run(prefix+"RWReaderWokenByWriter/"+name, func(t *testing.T) {
				ctx := deadline(t)
				w := holder.RWMutex(name)
				if ok, err := w.TryLock(ctx, 0, time.Hour); err != nil || !ok {
					t.Fatalf("TryLock %q: %v, %v", name, ok, err)
				}
				r := waiter.RWMutex(name)
				ch, _ := r.p.Read.Channel()
				got := make(chan error, 1)
				go func() { got <- r.RLock(ctx) }()
				parked(t, rdb, ch)
				if err := w.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatalf("the reader of %q was not woken by the writer's release (channel %q): %v", name, ch, err)
				}
				if err := r.RUnlock(ctx); err != nil {
					t.Fatal(err)
				}
			})

			t.Run(prefix+"RWWriterWokenByReader/"+name, func(t *testing.T) {
				ctx := deadline(t)
				rd := holder.RWMutex(name)
				if ok, err := rd.TryRLock(ctx, 0, time.Hour); err != nil || !ok {
					t.Fatalf("TryRLock %q: %v, %v", name, ok, err)
				}
				w := waiter.RWMutex(name)
				ch, _ := w.p.Write.Channel()
				got := make(chan error, 1)
				go func() { got <- w.Lock(ctx) }()
				parked(t, rdb, ch)
				if err := rd.RUnlock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatalf("the writer of %q was not woken by the last reader's release (channel %q): %v", name, ch, err)
				}
				if err := w.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}

		for _, name := range []string{"{t}x", "a{b}c", "{t}", "a{b", "plain"} {
			t.Run(prefix+"LatchWaiterWokenByCountDown/"+name, func(t *testing.T) {
				ctx := deadline(t)
				l := holder.CountDownLatch(name)
				if ok, err := l.TrySetCount(ctx, 1, time.Hour); err != nil || !ok {
					t.Fatalf("TrySetCount %q: %v, %v", name, ok, err)
				}
				got := make(chan error, 1)
				go func() { got <- waiter.CountDownLatch(name).Wait(ctx) }()
				key := name
				if ns != "" {
					key = ns + ":" + name
				}
				// Redisson's channel, or a stand-in that ends with it.
				parked(t, rdb, shardChannelLike(t, cl, "*redisson_countdownlatch__channel__{"+key+"}"))
				if err := l.CountDown(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatalf("the waiter of latch %q was not woken by the count-down: %v", name, err)
				}
			})
		}
	}
}

// deadline is the test's own context: far shorter than the re-check
// interval and the holders' leases, so a waiter that gets through got the
// message.
func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// released subscribes to channel as a Redisson waiter would (SSUBSCRIBE),
// runs release and requires want on the channel.
func released(t *testing.T, rdb *redis.ClusterClient, channel string, release func(context.Context), want string) {
	t.Helper()
	ctx := deadline(t)
	sub := rdb.SSubscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	release(ctx)
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != want {
		t.Fatalf("on %q after the release: %v, %v; want %q", channel, msg, err, want)
	}
}

// parked waits until channel has a shard subscriber, then lets the waiter
// make its attempt after subscribing, so that the release comes while it
// sleeps (a release before that attempt would let it through on its own,
// and the test would prove nothing; a late one only makes it pass later).
func parked(t *testing.T, rdb *redis.ClusterClient, channel string) {
	t.Helper()
	waitFor(t, "a subscriber on "+channel, func() bool {
		n, _ := rdb.PubSubShardNumSub(ctxT(t), channel).Result()
		return n[channel] > 0
	})
	time.Sleep(300 * time.Millisecond) // ordering only, no bound
}

// shardChannelLike returns the one shard channel with subscribers that
// matches pattern on some node of cl.
func shardChannelLike(t *testing.T, cl *testenv.Cluster, pattern string) string {
	t.Helper()
	var found string
	waitFor(t, "a shard channel like "+pattern, func() bool {
		for _, n := range cl.Nodes() {
			v, err := n.Do(ctxT(t), "PUBSUB", "SHARDCHANNELS", pattern)
			if err != nil {
				t.Fatal(err)
			}
			if l, _ := v.([]any); len(l) == 1 {
				found, _ = l[0].(string)
				return true
			}
		}
		return false
	})
	return found
}
