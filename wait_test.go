package dlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/lease"
)

// pubsubConns counts the server's pub/sub connections.
func pubsubConns(t testing.TB, ctx context.Context, r interface {
	Do(context.Context, ...any) (any, error)
}) int {
	t.Helper()
	v, err := r.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(fmt.Sprint(v), "\n")
}

// Many waiters on several names in one Client share one pub/sub connection,
// one subscription per channel, and no goroutine of their own.
func TestWaitersShareOneConnection(t *testing.T) {
	r := testenvRedis(t)
	holder, c := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	const names, perName = 5, 40
	held := make([]*Mutex, names)
	for i := range held {
		held[i] = holder.Mutex(fmt.Sprintf("share:%d", i))
		mustLock(t, held[i])
	}
	base := runtime.NumGoroutine()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, names*perName)
	for i := range names {
		for range perName {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := privateMutex(c, fmt.Sprintf("share:%d", i))
				if err := m.Lock(wctx); err == nil {
					errs <- fmt.Errorf("%s acquired while held", m.Name())
				}
			}()
		}
	}
	rdb := rdbFor(t, r)
	waitFor(t, "all waiters queued", func() bool {
		total := int64(0)
		for i := range names {
			n, _ := rdb.LLen(ctx, held[i].p.Keys().Queue).Result()
			total += n
		}
		return total == names*perName
	})
	// The waiters' own goroutines, and one per pop in flight (at most
	// lease.PopSlots per Client: the first waiters pop their hand-offs).
	if got := runtime.NumGoroutine() - base; got > names*perName+lease.PopSlots+3 {
		t.Errorf("%d waiters use %d goroutines", names*perName, got)
	}
	// One per Client: the waiters' Client, and the holder's (a holder
	// listens for ForceUnlock's news).
	if n := pubsubConns(t, ctx, r); n != 2 {
		t.Errorf("%d pub/sub connections, want 2 (one per Client)", n)
	}
	for i := range names {
		n, err := rdb.PubSubNumSub(ctx, chanOf(held[i])).Result()
		if err != nil || n[chanOf(held[i])] != 1 {
			t.Errorf("channel %s has %v subscribers (%v), want 1", chanOf(held[i]), n, err)
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Cancelled waiters leave in the background, each by one script call.
	for i := range names {
		waitFor(t, "the cancelled waiters to leave "+held[i].Name(), func() bool {
			n, _ := rdb.LLen(ctx, held[i].p.Keys().Queue).Result()
			return n == 0
		})
		mustUnlock(t, held[i])
	}
	// After the linger, the lock channels are unsubscribed.
	waitFor(t, "lock channels unsubscribed", func() bool {
		chans, _ := rdb.PubSubChannels(ctx, "redisson_lock__channel:*").Result()
		return len(chans) == 0
	})
}

// A release hands the lock to one waiter: the others are not woken, so a
// chain of hand-offs among W local waiters costs no retries.
func TestReleaseWakesOneWaiter(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	first := c.Mutex("wake-one")
	mustLock(t, first)
	const w = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	inside := 0
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := privateMutex(c, "wake-one")
			if err := m.Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			if inside > 1 {
				t.Error("two holders")
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inside--
			mu.Unlock()
			if err := m.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	rdb := rdbFor(t, r)
	waitFor(t, "all waiters queued", func() bool { n, _ := rdb.LLen(ctx, first.p.Keys().Queue).Result(); return n == w })
	resetCounts(t, ctx, r)
	mustUnlock(t, first)
	wg.Wait()
	// Per grant one release script and, for a woken waiter, its one
	// attempt, which confirms the hand-off in Redis (the message is only a
	// wake-up), plus the first holder's release: no retries, nobody woken
	// in vain. A waiter that pops its hand-off (one of the first
	// lease.PopSlots) sends no attempt: its grant is the RPUSH it pops.
	stats := commands(t, r)
	if popped := stats["rpush"]; popped < 1 || popped > lease.PopSlots || stats["evalsha"] != 2*w+1-popped {
		t.Fatalf("%d scripts and %d popped grants for %d hand-offs, want %d scripts less one per popped grant, and 1 to %d popped (no retries)",
			stats["evalsha"], popped, w, 2*w+1, lease.PopSlots)
	}
}

// Redisson's "0" wakes exactly one local waiter.
func TestRedissonReleaseWakesOneLocalWaiter(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	// A foreign holder (Redisson's layout) that does not use dlock's queue.
	if err := rdb.HSet(ctx, "foreign", "java-uuid:1", 1).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, "foreign", time.Minute)
	const w = 10
	results := make(chan error, w)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ms := make([]*Mutex, w)
	for i := range ms {
		ms[i] = privateMutex(c, "foreign")
		go func() { results <- ms[i].Lock(wctx) }()
	}
	waitFor(t, "all waiters queued", func() bool { n, _ := rdb.LLen(ctx, ms[0].p.Keys().Queue).Result(); return n == w })
	resetCounts(t, ctx, r)
	// Redisson's unlock: delete the hash, publish 0.
	rdb.Del(ctx, "foreign")
	rdb.Publish(ctx, chanOf(ms[0]), "0")
	select {
	case err := <-results:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second): // under the 3s re-check: woken by the message
		t.Fatal("no waiter woke on Redisson's release message")
	}
	time.Sleep(100 * time.Millisecond)
	if n := commands(t, r)["evalsha"]; n != 1 {
		t.Fatalf("%d waiters retried after one release message, want 1", n)
	}
	cancel()
	for range w - 1 {
		if err := <-results; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter: %v", err)
		}
	}
	for _, m := range ms {
		if m.Token() != 0 {
			mustUnlock(t, m)
		}
	}
}

// If the pub/sub connection drops while a hand-off is published, the waiter
// still gets the lock as soon as the subscription is back, long before the
// holder's TTL or the re-check interval.
func TestWaiterSurvivesPubSubDrop(t *testing.T) {
	r := testenvRedis(t)
	holderC := newClient(t, r)
	c := newClient(t, r, withRecheck(time.Minute)) // only the resubscription can rescue the waiter
	ctx := ctxT(t)
	h := holderC.Mutex("drop")
	if ok, err := h.TryLock(ctx, 0, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	w := c.Mutex("drop")
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	rdb := rdbFor(t, r)
	waitFor(t, "waiter queued", func() bool { n, _ := rdb.LLen(ctx, w.p.Keys().Queue).Result(); return n == 1 })
	first := h.Token()
	// The kill and the release are sent back to back: the release usually
	// lands while the waiter's connection is down (the hub reconnects after
	// 10ms); when it does not, the message arrives as usual.
	if _, err := r.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	mustUnlock(t, h)
	awaitNil(t, got, 10*time.Second, "waiter did not recover from the pub/sub drop")
	if w.Token() <= first {
		t.Fatalf("waiter's token %d not above the previous holder's %d", w.Token(), first)
	}
	mustUnlock(t, w)
}

// Where pub/sub is refused (here by an ACL), waiting degrades to periodic
// re-checks instead of hanging: the waiter still gets the lock.
func TestWaiterWithoutPubSub(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	if _, err := r.Do(ctx, "ACL", "SETUSER", "nopubsub", "on", ">pw", "~*", "+@all", "-@pubsub"); err != nil {
		t.Fatal(err)
	}
	holder := newClient(t, r)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: "nopubsub", Password: "pw",
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { rdb.Close() })
	c, err := New(rdb, withRecheck(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := holder.Mutex("no-pubsub")
	mustLock(t, h)
	w := c.Mutex("no-pubsub")
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	time.Sleep(300 * time.Millisecond)
	mustUnlock(t, h)
	awaitNil(t, got, 10*time.Second, "a waiter without pub/sub never got the lock")
	mustUnlock(t, w)
}
