package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// handoffBound is how soon a queued waiter must have the lock after the
// release that hands it over. Without the hand-off message the waiter would
// only find out at its next re-check (3s) or once the claim window (2s)
// ran out, so a grant this fast proves the message arrived.
const handoffBound = 1500 * time.Millisecond

// clusterEnv is one cluster shared by TestCluster's subtests.
type clusterEnv struct {
	cl    *testenv.Cluster
	nodes []*testenv.Redis
	rdb   *redis.ClusterClient
}

// nodeOf returns the node that serves key.
func (e *clusterEnv) nodeOf(key string) *testenv.Redis {
	return e.cl.SlotNode(int(keys.Slot(key)))
}

// spread fails the test unless names live on every node.
func (e *clusterEnv) spread(t *testing.T, names ...string) {
	t.Helper()
	seen := map[*testenv.Redis]bool{}
	for _, n := range names {
		seen[e.nodeOf(n)] = true
	}
	if len(seen) != len(e.nodes) {
		t.Fatalf("names %v live on %d of %d nodes", names, len(seen), len(e.nodes))
	}
}

// subscribedOn returns the nodes on which channel has a subscriber
// (PUBSUB CHANNELS is local to a node).
func (e *clusterEnv) subscribedOn(t *testing.T, channel string) []*testenv.Redis {
	t.Helper()
	var out []*testenv.Redis
	for _, r := range e.nodes {
		v, err := r.Do(ctxT(t), "PUBSUB", "CHANNELS", channel)
		if err != nil {
			t.Fatal(err)
		}
		if l, _ := v.([]any); len(l) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// shardSubscribedOn returns the nodes where channel is a shard channel
// with subscribers.
func (e *clusterEnv) shardSubscribedOn(t *testing.T, channel string) []*testenv.Redis {
	t.Helper()
	var out []*testenv.Redis
	for _, r := range e.nodes {
		v, err := r.Do(ctxT(t), "PUBSUB", "SHARDCHANNELS", channel)
		if err != nil {
			t.Fatal(err)
		}
		if l, _ := v.([]any); len(l) > 0 {
			out = append(out, r)
		}
	}
	return out
}

func resetStats(t *testing.T, r *testenv.Redis) {
	t.Helper()
	if err := r.ResetStats(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// lockAsync runs l.Lock in a goroutine; the result arrives on the channel.
func lockAsync(ctx context.Context, l Locker) <-chan error {
	got := make(chan error, 1)
	go func() { got <- l.Lock(ctx) }()
	return got
}

// await waits up to d for a result of lockAsync and fails on an error.
func await(t *testing.T, got <-chan error, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%s: not granted within %v", what, d)
	}
	return 0
}

// pending fails the test if a result of lockAsync arrives within d.
func pending(t *testing.T, got <-chan error, d time.Duration, what string) {
	t.Helper()
	select {
	case err := <-got:
		t.Fatalf("%s returned early: %v", what, err)
	case <-time.After(d):
	}
}

func (e *clusterEnv) waitWaiters(t *testing.T, c *Client, name string, n int) LockInfo {
	t.Helper()
	var info LockInfo
	waitFor(t, fmt.Sprintf("%d waiters on %s", n, name), func() bool {
		i, err := c.Inspect(ctxT(t), name)
		info = i
		return err == nil && len(i.Waiters) == n
	})
	return info
}

// checkClusterHygiene is checkHygiene for every node of the cluster: no
// subscription left, no lock left, and no key without a TTL.
func (e *clusterEnv) checkClusterHygiene(t *testing.T) {
	ctx := context.Background()
	for _, r := range e.nodes {
		deadline := time.Now().Add(5 * time.Second)
		for {
			v, err := r.Do(ctx, "PUBSUB", "CHANNELS", "*")
			if err != nil {
				t.Errorf("node %s: PUBSUB CHANNELS: %v", r.Addr(), err)
				break
			}
			if l, _ := v.([]any); len(l) == 0 {
				break
			} else if time.Now().After(deadline) {
				t.Errorf("node %s: channels still subscribed after the tests: %v", r.Addr(), l)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		v, err := r.Do(ctx, "KEYS", "*")
		if err != nil {
			t.Errorf("node %s: KEYS: %v", r.Addr(), err)
			continue
		}
		all, _ := v.([]any)
		for _, k := range all {
			key, _ := k.(string)
			if typ, err := r.Do(ctx, "TYPE", key); err == nil && typ == "hash" {
				t.Errorf("node %s: lock %q left after the tests", r.Addr(), key)
			}
			if ttl, err := r.Do(ctx, "PTTL", key); err == nil && ttl == int64(-1) {
				t.Errorf("node %s: key %q has no TTL", r.Addr(), key)
			}
		}
	}
}

// TestCluster runs the lock family against one three-master Redis Cluster:
// scripts must stay within a slot, renewals batch per slot, and pub/sub
// messages published by a script on one node must reach a Client whose
// subscription connection is on another.
func TestCluster(t *testing.T) {
	start := time.Now()
	cl := testenv.StartCluster(t, 3)
	e := &clusterEnv{cl: cl, nodes: cl.Nodes()}
	t.Logf("cluster started in %v", time.Since(start))
	// Registered before the Clients' Close, so it runs after them (and
	// before the cluster stops).
	t.Cleanup(func() {
		if !t.Failed() {
			e.checkClusterHygiene(t)
		}
	})
	e.rdb = cl.NewClient(t)
	a := newClientOn(t, e.rdb)
	b := newClientOn(t, cl.NewClient(t))

	t.Run("Mutex", func(t *testing.T) {
		ctx := ctxT(t)
		names := []string{"alpha", "beta", "gamma", "order:{42}:pay"}
		e.spread(t, names...)
		for _, name := range names {
			node := e.nodeOf(name)
			m := a.Mutex(name)
			mustLockTwice(t, m) // re-entry
			if n, err := m.HoldCount(ctx); n != 2 || err != nil {
				t.Fatalf("%s: HoldCount after re-entry = %d, %v", name, n, err)
			}
			// The hash is where the slot says, with Redisson's layout.
			if v, err := node.Do(ctx, "HGET", name, m.Owner()); v != "2" || err != nil {
				t.Fatalf("%s: HGET on node %s = %v, %v", name, node.Addr(), v, err)
			}
			first := m.Token()
			if first == 0 {
				t.Fatalf("%s: no fencing token", name)
			}
			mustUnlock(t, m)
			if l, err := m.IsLocked(ctx); !l || err != nil {
				t.Fatalf("%s: after one of two Unlocks IsLocked = %v, %v", name, l, err)
			}

			w := b.Mutex(name)
			got := lockAsync(ctx, w)
			e.waitWaiters(t, a, name, 1)
			// Sharded (the default on a Cluster): b waits on its client
			// channel of this lock's slot, on the slot's master, and the
			// hand-off is one SPUBLISH there, which stays in the shard.
			on := e.shardSubscribedOn(t, keys.ShardClientChannel(b.ID(), name))
			if len(on) != 1 || on[0] != node {
				t.Fatalf("%s: b's hand-off channel is subscribed on %d nodes, want the slot's master only", name, len(on))
			}
			resetStats(t, node)
			mustUnlock(t, m)
			if d := await(t, got, 5*time.Second, name+": waiter"); d > handoffBound {
				t.Fatalf("%s: the waiter got the lock %v after the release: not by hand-off", name, d)
			}
			// The waiter pops its grant (lease/pop.go): the release puts it
			// in the waiter's box on the lock's master, and publishes nothing.
			if s := commands(t, node); s["rpush"] != 1 || s["spublish"] != 0 || s["publish"] != 0 {
				t.Fatalf("%s: the release on %s sent %d RPUSH, %d SPUBLISH and %d PUBLISH, want the grant in the waiter's box", name, node.Addr(), s["rpush"], s["spublish"], s["publish"])
			}
			if l, err := m.IsLocked(ctx); !l || err != nil {
				t.Fatalf("%s: IsLocked after hand-off = %v, %v", name, l, err)
			}
			second := w.Token()
			mustUnlock(t, w)
			mustLock(t, m)
			third := m.Token()
			mustUnlock(t, m)
			if !(first < second && second < third) {
				t.Fatalf("%s: tokens %d, %d, %d do not increase", name, first, second, third)
			}
			if l, err := m.IsLocked(ctx); l || err != nil {
				t.Fatalf("%s: IsLocked after the last Unlock = %v, %v", name, l, err)
			}
		}
	})

	t.Run("ClassicHandoff", func(t *testing.T) {
		// WithShardedPubSub(ShardedOff): classic channels, as older
		// Redisson waits; the hand-off is one PUBLISH on the lock's master.
		ctx := ctxT(t)
		a := newClientOn(t, e.rdb, WithShardedPubSub(ShardedOff))
		b := newClientOn(t, e.rdb, WithShardedPubSub(ShardedOff))
		for _, name := range []string{"alpha", "beta", "gamma", "order:{42}:pay"} {
			node := e.nodeOf(name)
			m := a.Mutex(name)
			mustLock(t, m)
			got := lockAsync(ctx, b.Mutex(name))
			e.waitWaiters(t, a, name, 1)
			if on := e.subscribedOn(t, keys.ClientChannel(b.ID())); len(on) != 1 {
				t.Fatalf("b's classic hand-off channel is subscribed on %d nodes, want 1", len(on))
			}
			resetStats(t, node)
			mustUnlock(t, m)
			if d := await(t, got, 5*time.Second, name+": waiter"); d > handoffBound {
				t.Fatalf("%s: the waiter got the lock %v after the release: not by hand-off", name, d)
			}
			if s := commands(t, node); s["rpush"] != 1 || s["publish"] != 0 || s["spublish"] != 0 {
				t.Fatalf("%s: classic release sent %d RPUSH, %d PUBLISH, %d SPUBLISH; want the grant in the waiter's box", name, s["rpush"], s["publish"], s["spublish"])
			}
		}
	})

	t.Run("WatchdogRenewsEverySlot", func(t *testing.T) {
		ctx := ctxT(t)
		wd := newClientOn(t, e.rdb, WithWatchdogTimeout(600*time.Millisecond))
		const n = 50
		names := make([]string, n)
		locks := make([]*Mutex, n)
		for i := range names {
			names[i] = "wd:" + strconv.Itoa(i)
		}
		e.spread(t, names...)
		for i, name := range names {
			locks[i] = wd.Mutex(name)
			if ok, err := locks[i].TryLock(ctx, 0, 0); !ok || err != nil {
				t.Fatalf("TryLock %s = %v, %v", name, ok, err)
			}
		}
		// The other kinds, on every node, and a mix of kinds sharing one
		// slot ({batch}), which the watchdog renews in one script call.
		type held struct {
			name   string
			lock   Locker
			unlock func(context.Context) error
		}
		var others []held
		for i, name := range []string{"wdk:{alpha}", "wdk:{beta}", "wdk:{42}", "wdk:{batch}"} {
			f := wd.FairMutex(name + ":fair")
			w := wd.RWMutex(name + ":write")
			r1, r2 := wd.RWMutex(name+":read"), wd.RWMutex(name+":read")
			for _, l := range []Locker{f, w, r1.RLocker(), r2.RLocker()} {
				if err := l.Lock(ctx); err != nil {
					t.Fatalf("%d: Lock: %v", i, err)
				}
			}
			others = append(others,
				held{f.Name(), f, f.Unlock}, held{w.Name(), w, w.Unlock},
				held{r1.Name(), r1.RLocker(), r1.RUnlock}, held{r2.Name(), r2.RLocker(), r2.RUnlock})
			if i == 3 {
				m := wd.Mutex(name + ":mutex")
				mustLock(t, m)
				others = append(others, held{m.Name(), m, m.Unlock})
			}
		}
		for _, r := range e.nodes {
			resetStats(t, r)
		}
		time.Sleep(1500 * time.Millisecond) // 2.5 timeouts
		for _, m := range locks {
			if err := m.Err(); err != nil {
				t.Fatalf("%s lost: %v", m.Name(), err)
			}
			if l, err := m.IsLocked(ctx); !l || err != nil {
				t.Fatalf("%s: IsLocked = %v, %v", m.Name(), l, err)
			}
			if ttl, err := m.RemainingTTL(ctx); ttl <= 0 || ttl > 600*time.Millisecond || err != nil {
				t.Fatalf("%s: RemainingTTL = %v, %v", m.Name(), ttl, err)
			}
		}
		for _, h := range others {
			if err := h.lock.(interface{ Err() error }).Err(); err != nil {
				t.Fatalf("%s lost: %v", h.name, err)
			}
			info, err := a.Inspect(ctx, h.name)
			if err != nil || !info.Locked || info.TTL <= 0 || info.TTL > 600*time.Millisecond {
				t.Fatalf("%s: %+v, %v", h.name, info, err)
			}
		}
		for _, r := range e.nodes {
			if s := commands(t, r); s["pexpire"] == 0 {
				t.Fatalf("node %s saw no renewal: %v", r.Addr(), s)
			}
		}
		for _, m := range locks {
			mustUnlock(t, m)
		}
		for _, h := range others {
			if err := h.unlock(ctx); err != nil {
				t.Fatalf("%s: unlock: %v", h.name, err)
			}
		}
		for _, m := range locks {
			if l, err := m.IsLocked(ctx); l || err != nil {
				t.Fatalf("%s: IsLocked after Unlock = %v, %v", m.Name(), l, err)
			}
		}
		for _, h := range others {
			if info, err := a.Inspect(ctx, h.name); err != nil || info.Locked {
				t.Fatalf("%s after unlock: %+v, %v", h.name, info, err)
			}
		}
	})

	t.Run("OddNames", func(t *testing.T) {
		// Names whose companion keys need care to share the lock's slot:
		// no tag with a '{', a tag followed by a '}', a name that is a tag.
		ctx := ctxT(t)
		for _, name := range []string{"x{y", "a{b}c}", "{z}", "tail{", "{alpha}{beta}"} {
			m := a.Mutex(name)
			mustLock(t, m)
			w := b.Mutex(name)
			got := lockAsync(ctx, w)
			e.waitWaiters(t, a, name, 1)
			mustUnlock(t, m)
			await(t, got, 5*time.Second, name+": waiter")
			mustUnlock(t, w)
			f := b.FairMutex(name + ":f")
			mustLock(t, &f.Mutex)
			mustUnlock(t, &f.Mutex)
			rw := a.RWMutex(name + ":rw")
			if err := rw.RLock(ctx); err != nil {
				t.Fatalf("%s: RLock: %v", name, err)
			}
			if err := rw.RUnlock(ctx); err != nil {
				t.Fatalf("%s: RUnlock: %v", name, err)
			}
			if err := rw.Lock(ctx); err != nil {
				t.Fatalf("%s: Lock: %v", name, err)
			}
			if err := rw.Unlock(ctx); err != nil {
				t.Fatalf("%s: Unlock: %v", name, err)
			}
			if _, err := a.Inspect(ctx, name); err != nil {
				t.Fatalf("%s: Inspect: %v", name, err)
			}
		}
	})

	t.Run("Spin", func(t *testing.T) {
		ctx := ctxT(t)
		sp := newClientOn(t, e.rdb, WithSpin(time.Millisecond, 16*time.Millisecond))
		for _, name := range []string{"spin:{alpha}", "spin:{beta}", "spin:{42}"} {
			h := a.Mutex(name)
			mustLock(t, h)
			ht := h.Token()
			w := sp.Mutex(name)
			got := lockAsync(ctx, w)
			fair := sp.FairMutex(name + ":f")
			mustLock(t, &fair.Mutex)
			pending(t, got, 50*time.Millisecond, name+": spinning waiter")
			mustUnlock(t, h)
			await(t, got, 2*time.Second, name+": spinning waiter")
			mustUnlock(t, &fair.Mutex)
			if w.Token() <= ht {
				t.Fatalf("%s: token %d after %d", name, w.Token(), ht)
			}
			mustUnlock(t, w)
		}
	})

	t.Run("FairMutex", func(t *testing.T) {
		ctx := ctxT(t)
		for _, name := range []string{"fair:x", "fair:{alpha}", "fair:{beta}"} {
			h := a.FairMutex(name)
			mustLock(t, &h.Mutex)
			// a's second waiter: a handle of its own (a's FairMutex(name) is
			// h, whose other callers wait for h in the process).
			w1, w2 := b.FairMutex(name), privateFairMutex(a, name)
			got1 := lockAsync(ctx, w1)
			e.waitWaiters(t, a, name, 1)
			got2 := lockAsync(ctx, w2)
			info := e.waitWaiters(t, a, name, 2)
			if !strings.HasPrefix(info.Waiters[0].Owner, b.ID()+":") || !strings.HasPrefix(info.Waiters[1].Owner, a.ID()+":") {
				t.Fatalf("%s: queue %+v, want a waiter of %s then one of %s", name, info.Waiters, b.ID(), a.ID())
			}
			t0 := h.Token()
			mustUnlock(t, &h.Mutex)
			if d := await(t, got1, 5*time.Second, name+": first waiter"); d > handoffBound {
				t.Fatalf("%s: first waiter served %v after the release", name, d)
			}
			pending(t, got2, 100*time.Millisecond, name+": second waiter")
			t1 := w1.Token()
			mustUnlock(t, &w1.Mutex)
			if d := await(t, got2, 5*time.Second, name+": second waiter"); d > handoffBound {
				t.Fatalf("%s: second waiter served %v after the release", name, d)
			}
			if t2 := w2.Token(); !(0 < t0 && t0 < t1 && t1 < t2) {
				t.Fatalf("%s: tokens of the three holds %d, %d, %d do not increase", name, t0, t1, t2)
			}
			mustUnlock(t, &w2.Mutex)
		}
	})

	t.Run("RWMutex", func(t *testing.T) {
		ctx := ctxT(t)
		for _, name := range []string{"rw:y", "rw:{alpha}", "rw:{42}"} {
			r1, r2 := a.RWMutex(name), b.RWMutex(name)
			if err := r1.RLock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r2.RLock(ctx); err != nil {
				t.Fatal(err)
			}
			info, err := a.Inspect(ctx, name)
			if err != nil || info.Mode != "read" || len(info.Holders) != 2 {
				t.Fatalf("%s: two readers: %+v, %v", name, info, err)
			}
			readTok := max(r1.RToken(), r2.RToken())
			wr := a.RWMutex(name)
			got := lockAsync(ctx, wr)
			waitFor(t, "the writer to wait", func() bool {
				i, err := a.Inspect(ctx, name)
				return err == nil && i.WaitingWriters == 1
			})
			if err := r1.RUnlock(ctx); err != nil {
				t.Fatal(err)
			}
			pending(t, got, 200*time.Millisecond, name+": writer with one reader left")
			if err := r2.RUnlock(ctx); err != nil {
				t.Fatal(err)
			}
			if d := await(t, got, 5*time.Second, name+": writer"); d > handoffBound {
				t.Fatalf("%s: writer woke %v after the last reader left: not by pub/sub", name, d)
			}
			if wr.Token() <= readTok {
				t.Fatalf("%s: writer token %d not above readers' %d", name, wr.Token(), readTok)
			}
			info, err = b.Inspect(ctx, name)
			if err != nil || info.Mode != "write" || len(info.Holders) != 1 || info.Holders[0].Owner != wr.w.Owner() {
				t.Fatalf("%s: write-locked: %+v, %v", name, info, err)
			}
			if err := wr.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("MultiLock", func(t *testing.T) {
		ctx := ctxT(t)
		m1 := a.Mutex("gamma")               // node 0
		m2 := a.FairMutex("multi:a")         // node 1
		rl := a.RWMutex("multi:b").RLocker() // node 1, another slot
		rw := a.RWMutex("multi:c")           // node 2
		e.spread(t, "gamma", "multi:a", "multi:c")
		ml := a.MultiLock(rw, rl, m2, m1)
		if got := fmt.Sprint(ml.Names()); got != "[gamma multi:a multi:b multi:c]" {
			t.Fatalf("Names = %s", got)
		}
		locked := func(name string) bool {
			t.Helper()
			info, err := b.Inspect(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			return info.Locked
		}

		blocker := b.Mutex("multi:a")
		mustLock(t, blocker)
		if ok, err := ml.TryLock(ctx, 200*time.Millisecond, 0); ok || err != nil {
			t.Fatalf("TryLock with a member held elsewhere = %v, %v", ok, err)
		}
		for _, name := range []string{"gamma", "multi:b", "multi:c"} {
			if locked(name) {
				t.Fatalf("%s held after a failed MultiLock", name)
			}
		}
		mustUnlock(t, blocker)

		if ok, err := ml.TryLock(ctx, 2*time.Second, 0); !ok || err != nil {
			t.Fatalf("TryLock = %v, %v", ok, err)
		}
		for _, name := range ml.Names() {
			if !locked(name) {
				t.Fatalf("%s not held by the MultiLock", name)
			}
		}
		if m1.Token() == 0 || m2.Token() == 0 || rl.(interface{ Token() uint64 }).Token() == 0 || rw.Token() == 0 {
			t.Fatal("a member has no token")
		}
		if ok, err := b.Mutex("multi:c").TryLock(ctx, 0, 0); ok || err != nil {
			t.Fatalf("another owner took a member: %v, %v", ok, err)
		}
		if err := ml.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for _, name := range ml.Names() {
			if locked(name) {
				t.Fatalf("%s still held after Unlock", name)
			}
		}
		if err := ml.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Unlock = %v, want ErrNotHeld", err)
		}
	})

	t.Run("Latch", func(t *testing.T) {
		// A latch's count, count-downs and marker share its slot, wherever
		// it lives; Locks finds the markers on every master. (Names with a
		// hash tag are left out: Redisson's latch channel wraps the whole
		// name in braces, so its slot is not the name's, and a sharded
		// script cannot SPUBLISH on it.)
		ctx := ctxT(t)
		names := []string{"alpha", "beta", "gamma", "delta"}
		e.spread(t, names...)
		for _, name := range names {
			l := a.CountDownLatch(name)
			if ok, err := l.TrySetCount(ctx, 2, time.Minute); !ok || err != nil {
				t.Fatalf("%s: TrySetCount: %v, %v", name, ok, err)
			}
			if err := l.CountDown(ctx); err != nil {
				t.Fatalf("%s: CountDown: %v", name, err)
			}
		}
		infos, err := b.Locks(ctx, "*")
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, info := range infos {
			if info.Type == TypeLatch && info.Count == 1 && info.TTL > 0 {
				found++
			}
		}
		if found != len(names) {
			t.Fatalf("Locks found %d of %d latches: %+v", found, len(names), infos)
		}
		for _, name := range names {
			waited := make(chan error, 1)
			go func() { waited <- b.CountDownLatch(name).Wait(ctx) }()
			if err := a.CountDownLatch(name).CountDown(ctx); err != nil {
				t.Fatalf("%s: last CountDown: %v", name, err)
			}
			awaitNil(t, waited, 5*time.Second, name+": Wait")
			if n := e.nodeOf(name).NewClient(t).Exists(ctx, name, keys.Latch(name).Marker).Val(); n != 0 {
				t.Fatalf("%s: %d of its count and marker left at zero", name, n)
			}
		}
	})

	t.Run("Inspect", func(t *testing.T) {
		ctx := ctxT(t)
		for _, name := range []string{"inspect:{alpha}", "inspect:{beta}", "inspect:{42}"} {
			m := a.Mutex(name)
			mustLockTwice(t, m)
			w := b.Mutex(name)
			got := lockAsync(ctx, w)
			e.waitWaiters(t, a, name, 1)
			for _, c := range []*Client{a, b} {
				info, err := c.Inspect(ctx, name)
				if err != nil || !info.Locked || len(info.Holders) != 1 || info.Holders[0].Owner != m.Owner() || info.Holders[0].Count != 2 ||
					info.Token != m.Token() || info.TTL <= 0 || !strings.HasPrefix(info.Waiters[0].Owner, w.hd.Engine().Cfg.ClientID+":") || info.Mode != "" {
					t.Fatalf("%s: held lock: %+v, %v (owner %s token %d)", name, info, err, m.Owner(), m.Token())
				}
			}
			mustUnlock(t, m)
			mustUnlock(t, m)
			await(t, got, 5*time.Second, name+": waiter")
			last := w.Token()
			mustUnlock(t, w)
			info, err := a.Inspect(ctx, name)
			if err != nil || info.Locked || len(info.Holders) != 0 || info.TTL != 0 || info.Token != last {
				t.Fatalf("%s: free lock: %+v, %v", name, info, err)
			}
		}
	})

	t.Run("ForceUnlock", func(t *testing.T) {
		ctx := ctxT(t)
		wd := newClientOn(t, e.rdb, WithWatchdogTimeout(600*time.Millisecond))
		for _, name := range []string{"force:{alpha}", "force:{beta}", "force:{42}"} {
			h := wd.Mutex(name)
			mustLock(t, h)
			held := h.Token()
			w := b.Mutex(name)
			got := lockAsync(ctx, w)
			e.waitWaiters(t, a, name, 1)
			if ok, err := a.Mutex(name).ForceUnlock(ctx); !ok || err != nil {
				t.Fatalf("%s: ForceUnlock = %v, %v", name, ok, err)
			}
			if d := await(t, got, 5*time.Second, name+": waiter"); d > handoffBound {
				t.Fatalf("%s: waiter served %v after ForceUnlock", name, d)
			}
			select {
			case <-h.Done():
			case <-time.After(2 * time.Second):
				t.Fatalf("%s: the forced-out holder did not learn of it", name)
			}
			if !errors.Is(h.Err(), ErrLockLost) {
				t.Fatalf("%s: holder Err = %v, want ErrLockLost", name, h.Err())
			}
			if err := h.Unlock(ctx); !errors.Is(err, ErrLockLost) {
				t.Fatalf("%s: holder Unlock = %v, want ErrLockLost", name, err)
			}
			if w.Token() <= held {
				t.Fatalf("%s: token after ForceUnlock %d, before %d", name, w.Token(), held)
			}
			mustUnlock(t, w)
			if ok, err := a.Mutex(name).ForceUnlock(ctx); ok || err != nil {
				t.Fatalf("%s: ForceUnlock of a free lock = %v, %v", name, ok, err)
			}
		}
	})

	t.Run("WithLock", func(t *testing.T) {
		ctx := ctxT(t)
		kinds := []struct {
			opts   []LockOption
			shared bool // a second holder of the same kind gets in
		}{{nil, false}, {[]LockOption{Fair()}, false}, {[]LockOption{Write()}, false}, {[]LockOption{Read()}, true}}
		for _, name := range []string{"order:{7}:ship", "order:{42}:ship", "beta:ship"} {
			for _, k := range kinds {
				ran := false
				err := a.WithLock(ctx, name, func(ctx context.Context) error {
					ran = true
					info, err := b.Inspect(ctx, name)
					if err != nil || !info.Locked {
						return fmt.Errorf("inside WithLock: %+v, %v", info, err)
					}
					opts := append([]LockOption{WaitTime(100 * time.Millisecond)}, k.opts...)
					err = b.WithLock(ctx, name, func(context.Context) error { return nil }, opts...)
					switch {
					case k.shared && err != nil:
						return fmt.Errorf("second reader: %w", err)
					case !k.shared && !errors.Is(err, ErrWaitTimeout):
						return fmt.Errorf("second holder: %v, want ErrWaitTimeout", err)
					}
					return ctx.Err()
				}, k.opts...)
				if err != nil || !ran {
					t.Fatalf("%s %d options: WithLock = %v (ran %v)", name, len(k.opts), err, ran)
				}
				// The second holder that gave up leaves its queue in the
				// background, passing on a hand-off that reached it.
				waitFor(t, name+" free after WithLock", func() bool {
					info, err := a.Inspect(ctx, name)
					return err == nil && !info.Locked
				})
			}
		}
	})
}
