package dlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// The trust model's first two classes: a client that may only PUBLISH, and
// one that may also read every key. Neither may cause a grant, a false loss,
// a hang or a panic. The attacker here is both: it reads everything Redis
// shows (subscribed channels, queues, owners, permit ids, leader fields) and
// publishes on every channel the library listens to random bytes, replayed
// real messages and messages crafted from what it read.

// sniffer records every message published on the server while it runs.
type sniffer struct {
	ps   *redis.PubSub
	mu   sync.Mutex
	msgs []*redis.Message
	done chan struct{}
}

func sniff(t *testing.T, rdb *redis.Client) *sniffer {
	t.Helper()
	s := &sniffer{ps: rdb.PSubscribe(context.Background(), "*"), done: make(chan struct{})}
	if _, err := s.ps.Receive(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.done)
		for m := range s.ps.Channel() {
			s.mu.Lock()
			s.msgs = append(s.msgs, m)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *sniffer) stop() {
	_ = s.ps.Close()
	<-s.done
}

func (s *sniffer) captured() []*redis.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*redis.Message(nil), s.msgs...)
}

// attacker publishes forged messages on a Redis it can read.
type attacker struct {
	rdb    *redis.Client
	replay []*redis.Message
	rng    *rand.Rand
	sent   int
	// wakers counts the messages that reached a subscriber and could wake
	// one waiter or start one renewal: those naming a queued ticket or a
	// lock key on a client channel, and any on a lock's channel.
	wakers int
}

var entryRE = regexp.MustCompile(`^(\d+) (\d+) ((.*):[^:]*)$`)

// volley publishes one round of forgeries on every channel somebody
// listens to, counting them in a.sent.
func (a *attacker) volley(t *testing.T, ctx context.Context) {
	t.Helper()
	chans, err := a.rdb.PubSubChannels(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Everything readable: queue entries give tickets and client ids, hash
	// fields and permit ids give client ids.
	tickets := map[string]bool{"0": true, "1": true, fmt.Sprint(a.rng.Uint64()): true}
	queued := map[string]bool{}
	cids := map[string]bool{}
	for _, ch := range chans {
		if cid, ok := strings.CutPrefix(ch, keys.ClientChannelPrefix); ok {
			cids[cid] = true
		}
	}
	var all []string
	iter := a.rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		all = append(all, iter.Val())
	}
	for _, k := range all {
		typ, _ := a.rdb.Type(ctx, k).Result()
		var items []string
		switch typ {
		case "list":
			items, _ = a.rdb.LRange(ctx, k, 0, -1).Result()
		case "hash":
			items, _ = a.rdb.HKeys(ctx, k).Result()
		case "zset":
			items, _ = a.rdb.ZRange(ctx, k, 0, -1).Result()
		}
		for _, it := range items {
			if m := entryRE.FindStringSubmatch(it); m != nil {
				tickets[m[1]], queued[m[1]] = true, true
				cids[m[4]] = true
			} else if i := strings.LastIndexByte(it, ':'); i > 0 {
				cids[it[:i]] = true
			}
		}
	}
	pub := func(ch, msg string) {
		n, err := a.rdb.Publish(ctx, ch, msg).Result()
		if err != nil {
			t.Fatal(err)
		}
		a.sent++
		wakes := true
		if strings.HasPrefix(ch, keys.ClientChannelPrefix) {
			tk, _, _ := strings.Cut(msg, " ")
			_, forced := keys.ParseForcedMessage(msg)
			wakes = queued[tk] || forced
		}
		if n > 0 && wakes {
			a.wakers++
		}
	}
	huge := fmt.Sprint(uint64(1) << 62)
	for cid := range cids {
		for tk := range tickets {
			for _, msg := range []string{tk + " 999999 30000", tk + " 0 30000", tk + " " + huge + " 1", tk} {
				pub(keys.ClientChannelPrefix+cid, msg)
			}
		}
	}
	for cid := range cids {
		for _, k := range all {
			pub(keys.ClientChannelPrefix+cid, keys.ForcedMessage(k))
		}
	}
	for _, ch := range chans {
		b := make([]byte, 1+a.rng.IntN(64))
		for i := range b {
			b[i] = byte(a.rng.Uint32())
		}
		for _, msg := range []string{string(b), "0", "1", "L " + huge + " forged", "L 1 forged", "L x", ""} {
			pub(ch, msg)
		}
	}
	for _, m := range a.replay {
		pub(m.Channel, m.Payload)
	}
}

// flood runs volleys for d and returns how many of its messages could wake
// a waiter or start a renewal (a.wakers).
func (a *attacker) flood(t *testing.T, ctx context.Context, d time.Duration) int {
	t.Helper()
	start := a.wakers
	for end := time.Now().Add(d); time.Now().Before(end); {
		a.volley(t, ctx)
		time.Sleep(5 * time.Millisecond)
	}
	return a.wakers - start
}

// scriptCalls counts the commands a waiter spends on attempts and reads.
func scriptCalls(t *testing.T, r *testenv.Redis) int64 {
	s := commands(t, r)
	return s["evalsha"] + s["eval"] + s["exec"] + s["hget"]
}

// forgeKind is one kind of waiter under attack.
type forgeKind struct {
	name string
	// hold takes the lock (or permit, or leadership) through c and returns
	// its release, and a check that the hold is still intact.
	hold func(t *testing.T, ctx context.Context, c *Client, name string) (release func(), intact func() error)
	// wait blocks until c holds; token is the fencing token Lock reported
	// (0 where the kind has none).
	wait func(ctx context.Context, c *Client, name string) (release func(), intact func() error, token uint64, err error)
	// fence is the key of the name's fencing counter, "" for none.
	fence func(name string) string
}

func mutexKind(name string, mutex func(c *Client, name string) *Mutex) forgeKind {
	return forgeKind{
		name: name,
		hold: func(t *testing.T, ctx context.Context, c *Client, n string) (func(), func() error) {
			m := mutex(c, n)
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			return func() { _ = m.Unlock(ctx) }, m.Err
		},
		wait: func(ctx context.Context, c *Client, n string) (func(), func() error, uint64, error) {
			m := mutex(c, n)
			err := m.Lock(ctx)
			return func() { _ = m.Unlock(ctx) }, m.Err, m.Token(), err
		},
		fence: func(n string) string { return keys.For(n).Fence },
	}
}

// holdWrite takes the write side of RWMutex n: readers and writers wait.
func holdWrite(t *testing.T, ctx context.Context, c *Client, n string) (func(), func() error) {
	rw := c.RWMutex(n)
	if err := rw.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	return func() { _ = rw.Unlock(ctx) }, rw.Err
}

func forgeKinds() []forgeKind {
	noErr := func() error { return nil }
	return []forgeKind{
		mutexKind("mutex", func(c *Client, n string) *Mutex { return c.Mutex(n) }),
		mutexKind("fair", func(c *Client, n string) *Mutex { return &c.FairMutex(n).Mutex }),
		{
			name: "rw-write",
			hold: holdWrite,
			wait: func(ctx context.Context, c *Client, n string) (func(), func() error, uint64, error) {
				rw := c.RWMutex(n)
				err := rw.Lock(ctx)
				return func() { _ = rw.Unlock(ctx) }, rw.Err, rw.Token(), err
			},
			fence: func(n string) string { return keys.For(n).Fence },
		},
		{
			name: "rw-read",
			hold: holdWrite,
			wait: func(ctx context.Context, c *Client, n string) (func(), func() error, uint64, error) {
				rw := c.RWMutex(n)
				err := rw.RLock(ctx)
				return func() { _ = rw.RUnlock(ctx) }, noErr, rw.RToken(), err
			},
			fence: func(n string) string { return keys.For(n).Fence },
		},
		{
			name: "semaphore",
			hold: func(t *testing.T, ctx context.Context, c *Client, n string) (func(), func() error) {
				p, err := c.Semaphore(n, 1).Acquire(ctx, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				return func() { _ = p.Release(ctx) }, p.Err
			},
			wait: func(ctx context.Context, c *Client, n string) (func(), func() error, uint64, error) {
				p, err := c.Semaphore(n, 1).Acquire(ctx, time.Minute, 0)
				if err != nil {
					return nil, nil, 0, err
				}
				return func() { _ = p.Release(ctx) }, p.Err, 0, nil
			},
			fence: func(string) string { return "" },
		},
		{
			name: "election",
			hold: func(t *testing.T, ctx context.Context, c *Client, n string) (func(), func() error) {
				e := c.Election(n)
				lctx, err := e.Campaign(ctx, "holder")
				if err != nil {
					t.Fatal(err)
				}
				return func() { _ = e.Resign(ctx) }, func() error { return context.Cause(lctx) }
			},
			wait: func(ctx context.Context, c *Client, n string) (func(), func() error, uint64, error) {
				e := c.Election(n)
				lctx, err := e.Campaign(ctx, "waiter")
				if err != nil {
					return nil, nil, 0, err
				}
				return func() { _ = e.Resign(ctx) }, func() error { return context.Cause(lctx) }, e.m.Token(), nil
			},
			fence: func(n string) string { return keys.Election(n).Lock },
		},
	}
}

type waitResult struct {
	release func()
	intact  func() error
	token   uint64
	err     error
}

// Forged messages on every channel never grant, never end a valid hold, and
// cost a waiter at most one attempt each.
func TestForgedMessagesNeverGrant(t *testing.T) {
	r := testenvRedis(t)
	for _, k := range forgeKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := ctxT(t)
			name := "forge:" + k.name
			holder, waiter := newClient(t, r), newClient(t, r)
			rdb := rdbFor(t, r)
			sn := sniff(t, rdbFor(t, r))

			// A real hand-off first, for the attacker to capture and replay.
			release, _ := k.hold(t, ctx, holder, name)
			got := make(chan waitResult, 1)
			go func() {
				rel, intact, tok, err := k.wait(ctx, waiter, name)
				got <- waitResult{rel, intact, tok, err}
			}()
			waitSubscribed(t, ctx, rdb, waiter)
			release()
			first := <-got
			if first.err != nil {
				t.Fatal(first.err)
			}
			first.release()
			sn.stop()
			a := &attacker{rdb: rdb, replay: sn.captured(), rng: rand.New(rand.NewPCG(1, 2))}
			// A Mutex's waiter pops its hand-off (lease/pop.go): then no
			// message carried it, and the forgeries are crafted ones only.
			if len(a.replay) == 0 && commands(t, r)["blpop"] == 0 {
				t.Fatal("no real message captured to replay, and no hand-off popped")
			}

			// Now the attack, against a waiter queued behind a live holder.
			release, holderIntact := k.hold(t, ctx, holder, name)
			var holderTok uint64
			if fk := k.fence(name); fk != "" && k.name != "election" {
				holderTok, _ = rdb.Get(ctx, fk).Uint64()
			}
			go func() {
				rel, intact, tok, err := k.wait(ctx, waiter, name)
				got <- waitResult{rel, intact, tok, err}
			}()
			waitSubscribed(t, ctx, rdb, waiter)
			time.Sleep(50 * time.Millisecond) // let the waiter settle in its queue
			if err := r.ResetStats(ctx); err != nil {
				t.Fatal(err)
			}
			before := scriptCalls(t, r)
			sent := a.flood(t, ctx, 400*time.Millisecond)
			select {
			case res := <-got:
				if res.err == nil {
					res.release()
				}
				t.Fatalf("the waiter returned (token %d, err %v) while another holds: granted by a forged message", res.token, res.err)
			case <-time.After(100 * time.Millisecond):
			}
			calls := scriptCalls(t, r) - before
			t.Logf("%d forged messages that could wake, %d attempts or reads", sent, calls)
			// At most one attempt (or renewal) per message that could wake:
			// the attack never makes a waiter spin.
			if calls > int64(sent)+5 {
				t.Errorf("%d forged messages cost %d attempts or reads", sent, calls)
			}
			if err := holderIntact(); err != nil {
				t.Fatalf("the holder's hold ended under forged messages: %v", err)
			}
			release()
			var res waitResult
			select {
			case res = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter was not granted after the real release")
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			if fk := k.fence(name); fk != "" && k.name != "election" {
				last, err := rdb.Get(ctx, fk).Uint64()
				if err != nil || res.token != last || res.token <= holderTok {
					t.Errorf("granted with token %d; Redis's counter says %d (%v), the holder before had %d", res.token, last, err, holderTok)
				}
			}
			// And the waiter, now a holder, keeps its hold under attack.
			a.flood(t, ctx, 200*time.Millisecond)
			if err := res.intact(); err != nil {
				t.Errorf("the new holder's hold ended under forged messages: %v", err)
			}
			res.release()
		})
	}
}

// waitSubscribed waits until c's client channel is subscribed, and the
// renewal of c's holds that its confirmation asks for (Renewer.Hurry) is
// done, so that a count of commands after it does not see that renewal.
func waitSubscribed(t *testing.T, ctx context.Context, rdb *redis.Client, c *Client) {
	t.Helper()
	waitFor(t, "the waiter subscribed", func() bool {
		n, err := rdb.PubSubNumSub(ctx, keys.ClientChannelPrefix+c.ID()).Result()
		return err == nil && n[keys.ClientChannelPrefix+c.ID()] == 1
	})
	select {
	case <-c.e.Hub().ClientReady():
	case <-ctx.Done():
		t.Fatal("the client channel was never confirmed")
	}
	waitFor(t, "the confirmation's renewal", c.e.RenewalsQuiet)
}

// An observer believes Redis, not announcements: a forged "L <token> <v>"
// neither shows a false leader nor hides the real next one.
func TestForgedElectionAnnouncement(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	a, b, watcher := newClient(t, r), newClient(t, r), newClient(t, r)
	rdb := rdbFor(t, r)
	ea := a.Election("forge:observe")
	if _, err := ea.Campaign(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := watcher.Election("forge:observe").Observe(octx)
	if v := <-seen; v != "alice" {
		t.Fatalf("Observe began with %q, want alice", v)
	}
	ch := keys.Election("forge:observe").Changes
	huge := fmt.Sprint(uint64(1) << 62)
	for _, msg := range []string{"L " + huge + " mallory", "L 1 eve", "L", "garbage", "0"} {
		if err := rdb.Publish(ctx, ch, msg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case v := <-seen:
		t.Fatalf("Observe delivered %q after forged announcements; alice still leads", v)
	case <-time.After(300 * time.Millisecond):
	}
	if v, err := watcher.Election("forge:observe").Leader(ctx); err != nil || v != "alice" {
		t.Fatalf("Leader = %q, %v; want alice", v, err)
	}
	// The real next leader still shows, though a forged term was higher.
	eb := b.Election("forge:observe")
	won := make(chan error, 1)
	go func() {
		_, err := eb.Campaign(ctx, "bob")
		won <- err
	}()
	waitSubscribed(t, ctx, rdb, b)
	if err := ea.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	// Alice's resignation may show first as a vacancy ("").
	v := ""
	for v == "" {
		select {
		case v = <-seen:
		case <-time.After(10 * time.Second):
			t.Fatal("the real new leader was never observed after a forged higher term")
		}
	}
	if v != "bob" {
		t.Fatalf("Observe delivered %q, want bob", v)
	}
	_ = eb.Resign(ctx)
}
