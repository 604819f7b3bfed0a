package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/kind"
)

// watchTTLs reads the PTTL of ks every millisecond until the test ends,
// and fails it if any of them exists without a TTL: no key of a latch lives
// forever, at any point (a script's steps are not observable, its outcome
// is).
func watchTTLs(t *testing.T, rdb *redis.Client, ks ...string) {
	t.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var bad []string
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for _, k := range ks {
				if d, err := rdb.PTTL(context.Background(), k).Result(); err == nil && d == -1 {
					mu.Lock()
					bad = append(bad, k)
					mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		if len(bad) > 0 {
			t.Errorf("keys seen without a TTL: %v", bad)
		}
	})
}

// waitSubscribers waits until channel has n subscribers.
func waitSubscribers(t *testing.T, rdb *redis.Client, channel string, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rdb.PubSubNumSub(context.Background(), channel).Val()[channel] != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s never had %d subscribers", channel, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TrySetCount sets the count only on an absent latch, in Redisson's layout
// (a string at the name, with the TTL given); Count reads it, and 0 for an
// absent latch; a count-down on an absent latch changes nothing.
func TestLatchTrySetCount(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	c := newClient(t, shared)
	ks := keys.Latch("latch:set")
	// The server is shared: start from no latch, as under -count=2.
	if err := rdb.Del(ctx, ks.Count, ks.Downs, ks.Marker).Err(); err != nil {
		t.Fatal(err)
	}
	watchTTLs(t, rdb, ks.Count, ks.Downs, ks.Marker)
	l := c.CountDownLatch("latch:set")
	if n, err := l.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count of an absent latch: %d, %v", n, err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, ks.Count, ks.Downs).Val(); n != 0 {
		t.Fatalf("a count-down on an absent latch left %d keys", n)
	}
	if ok, err := l.TrySetCount(ctx, 3, 10*time.Second); err != nil || !ok {
		t.Fatalf("first TrySetCount: %v, %v", ok, err)
	}
	if ok, err := c.CountDownLatch("latch:set").TrySetCount(ctx, 5, time.Minute); err != nil || ok {
		t.Fatalf("second TrySetCount: %v, %v; want false", ok, err)
	}
	if v := rdb.Get(ctx, "latch:set").Val(); v != "3" {
		t.Fatalf("the count at the latch's name is %q, want \"3\"", v)
	}
	if d := rdb.PTTL(ctx, "latch:set").Val(); d <= 0 || d > 10*time.Second {
		t.Fatalf("the count's TTL is %v, want at most the 10s given", d)
	}
	// The count's TTL is read first: the marker's, read after, may only be
	// lower by the time between the reads (both were set by one script).
	cd := rdb.PTTL(ctx, ks.Count).Val()
	if v, d := rdb.Get(ctx, ks.Marker).Val(), rdb.PTTL(ctx, ks.Marker).Val(); !strings.HasPrefix(v, "3 ") || d <= 0 || d > cd+time.Millisecond {
		t.Fatalf("the latch's marker is %q living %v, the count living %v", v, d, cd)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Count(ctx); err != nil || n != 2 {
		t.Fatalf("Count after one count-down: %d, %v", n, err)
	}
	// The count's TTL is read first: the set's, read after it, can only
	// have run down further (read the other way round, 2 ms between the
	// two reads failed it under load).
	if cd, d := rdb.PTTL(ctx, ks.Count).Val(), rdb.PTTL(ctx, ks.Downs).Val(); d <= 0 || d > cd+time.Millisecond {
		t.Fatalf("the count-downs' set lives %v, the count %v", d, cd)
	}
	for range 2 {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.Exists(ctx, ks.Count, ks.Marker).Val(); n != 0 {
		t.Fatal("the latch or its marker was not deleted at zero")
	}
	if n, err := l.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count at zero: %d, %v", n, err)
	}
	if ok, err := l.TrySetCount(ctx, 1, time.Second); err != nil || !ok {
		t.Fatalf("TrySetCount after zero: %v, %v", ok, err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
}

// The last count-down wakes a Wait in each of 3 Clients by an event: their
// re-check is a minute away.
func TestLatchCountDownWakesEveryClient(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	ks := keys.Latch("latch:wake")
	watchTTLs(t, rdb, ks.Count, ks.Downs, ks.Marker)
	counter := newClient(t, shared).CountDownLatch("latch:wake")
	if ok, err := counter.TrySetCount(ctx, 2, 30*time.Second); err != nil || !ok {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	woke := make(chan time.Time, 3)
	for range 3 {
		l := newClient(t, shared, withRecheck(time.Minute)).CountDownLatch("latch:wake")
		go func() {
			if err := l.Wait(ctx); err != nil {
				t.Error(err)
			}
			woke <- time.Now()
		}()
	}
	waitSubscribers(t, rdb, ks.Channel, 3)
	if err := counter.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woke:
		t.Fatal("a Wait returned at count 1")
	case <-time.After(100 * time.Millisecond):
	}
	last := time.Now()
	if err := counter.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for range 3 {
		select {
		case at := <-woke:
			slowest = max(slowest, at.Sub(last))
		case <-time.After(5 * time.Second):
			t.Fatal("a Wait was not woken by the last count-down")
		}
	}
	if slowest > 100*time.Millisecond {
		t.Fatalf("the slowest Wait returned %v after the last count-down, want under 100ms", slowest)
	}
	t.Logf("3 Clients' Waits returned within %v of the last count-down (re-check: 1m)", slowest)
}

// Wait on an absent latch returns at once, without subscribing.
func TestLatchWaitOnAbsentLatch(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, shared)
	start := time.Now()
	if err := c.CountDownLatch("latch:absent").Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Wait on an absent latch took %v", d)
	}
	if subs := c.e.Hub().Subscribed(); len(subs) != 0 {
		t.Fatalf("Wait on an absent latch subscribed %v", subs)
	}
}

// Anyone may publish on the latch's channel: a forged "0" (or anything)
// wakes the waiters, which read the count and wait on while it is above
// zero. The real last count-down still wakes them by its message.
func TestLatchForgedMessageDoesNotOpen(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	c := newClient(t, shared, withRecheck(time.Minute))
	l := c.CountDownLatch("latch:forged")
	if _, err := l.TrySetCount(ctx, 1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	ch := keys.Latch("latch:forged").Channel
	waitSubscribers(t, rdb, ch, 1)
	for _, msg := range []string{"0", "1", "anything", "0"} {
		rdb.Publish(ctx, ch, msg)
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) on forged messages at count 1", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	awaitNil(t, done, time.Second, "Wait was not woken by the last count-down")
}

// Wait returns ctx's cause promptly against a Redis that never answers:
// cut off before Wait (its first read hangs) and while it waits (its
// re-checks hang).
func TestLatchWaitHonoursCtxAgainstABlackhole(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	ks := keys.Latch("latch:blackhole")
	if _, err := newClient(t, shared).CountDownLatch(ks.Count).TrySetCount(ctx, 1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	defer rdb.Del(ctx, ks.Count)
	cause := errors.New("the caller gave up")
	for _, waiting := range []bool{false, true} {
		t.Run(fmt.Sprint("cut while waiting=", waiting), func(t *testing.T) {
			proxy := startBlackhole(t, shared.Addr())
			c := clientVia(t, proxy, withRecheck(50*time.Millisecond), WithCloseTimeout(300*time.Millisecond))
			wctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			if !waiting {
				proxy.Cut()
			}
			done := make(chan error, 1)
			go func() { done <- c.CountDownLatch(ks.Count).Wait(wctx) }()
			if waiting {
				waitSubscribers(t, rdb, ks.Channel, 1)
				proxy.Cut()
			}
			time.Sleep(200 * time.Millisecond) // reads now hang
			cancelled := time.Now()
			cancel(cause)
			select {
			case err := <-done:
				if !errors.Is(err, cause) {
					t.Fatalf("Wait returned %v, want the cause", err)
				}
				if d := time.Since(cancelled); d > 100*time.Millisecond {
					t.Fatalf("Wait returned %v after its ctx ended", d)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("Wait did not return when its ctx ended")
			}
		})
	}
}

// Bad input fails with ErrInvalidArgument before any network call.
func TestLatchBadInput(t *testing.T) {
	c, err := New(unreachable(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	fine := c.CountDownLatch("fine")
	for name, call := range map[string]func() error{
		"n=0":     func() error { _, err := fine.TrySetCount(ctx, 0, time.Second); return err },
		"n<0":     func() error { _, err := fine.TrySetCount(ctx, -1, time.Second); return err },
		"ttl=0":   func() error { _, err := fine.TrySetCount(ctx, 1, 0); return err },
		"ttl<0":   func() error { _, err := fine.TrySetCount(ctx, 1, -time.Second); return err },
		"ttl<1ms": func() error { _, err := fine.TrySetCount(ctx, 1, 500*time.Microsecond); return err },
	} {
		if err := call(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	//lint:ignore SA1012 testing the nil check
	if err := fine.Wait(nil); !errors.Is(err, ErrInvalidArgument) { //nolint:staticcheck
		t.Errorf("nil ctx: %v", err)
	}
	for _, name := range []string{"", strings.Repeat("n", 2000), "a}b", "\xff"} {
		l := c.CountDownLatch(name)
		_, e1 := l.TrySetCount(ctx, 1, time.Second)
		e2 := l.CountDown(ctx)
		_, e3 := l.Count(ctx)
		e4 := l.Wait(ctx)
		for i, err := range []error{e1, e2, e3, e4} {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("name %.20q, call %d: %v, want ErrInvalidArgument", name, i+1, err)
			}
		}
	}
	_ = c.Close()
	if _, err := fine.Count(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Count after Close: %v, want ErrClosed", err)
	}
}

// A count-down that go-redis resends (its reply was lost) counts once: the
// script remembers each call's id.
func TestLatchResentCountDownCountsOnce(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	c := newClient(t, shared)
	if _, err := c.CountDownLatch("latch:resent").TrySetCount(ctx, 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ks := keys.Latch("latch:resent")
	for range 2 {
		if err := rdb.Eval(ctx, kind.Source("latch_down.lua"), []string{ks.Count, ks.Downs}, ks.Channel, "one-id", 60000).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if v := rdb.Get(ctx, ks.Count).Val(); v != "2" {
		t.Fatalf("count %q after one count-down sent twice, want 2", v)
	}
	rdb.Del(ctx, ks.Count, ks.Downs)
}

// A TrySetCount whose reply was lost and that go-redis or the wire resends
// (the very same call) answers true again: the marker carries the id of the
// call that set the count. Any other call on the existing latch still
// answers false, and a latch counted down to zero can be set again.
func TestLatchResentTrySetCountAnswersTrue(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	c := newClient(t, shared)
	const name = "latch:resent-set"
	ks := keys.Latch(name)
	watchTTLs(t, rdb, ks.Count, ks.Downs, ks.Marker)
	set := func(n int64, id string) int64 {
		t.Helper()
		v, err := rdb.Eval(ctx, kind.Source("latch_set.lua"), []string{ks.Count, ks.Marker, ks.Downs}, n, 30000, ks.Channel, id).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i := range 2 {
		if v := set(3, "call-1"); v != 1 {
			t.Fatalf("TrySetCount's call, sent %d times: %d, want 1 (this call set the count)", i+1, v)
		}
	}
	if v := set(3, "call-2"); v != 0 {
		t.Fatalf("another call on the set latch: %d, want 0", v)
	}
	if v := set(3, "call-10"); v != 0 {
		t.Fatalf("another call whose id begins with the first's: %d, want 0", v)
	}
	if v := rdb.Get(ctx, ks.Count).Val(); v != "3" {
		t.Fatalf("the count is %q, want \"3\"", v)
	}
	l := c.CountDownLatch(name)
	if ok, err := l.TrySetCount(ctx, 3, 30*time.Second); err != nil || ok {
		t.Fatalf("TrySetCount on the latch another call set: %v, %v; want false", ok, err)
	}
	for range 3 {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.Exists(ctx, ks.Count, ks.Marker).Val(); n != 0 {
		t.Fatal("the latch or its marker outlived its count-downs to zero")
	}
	// Set again through the handle: its call's own resend (its id read from
	// the marker) answers true, the old call's and the handle's next false.
	if ok, err := l.TrySetCount(ctx, 2, 30*time.Second); err != nil || !ok {
		t.Fatalf("TrySetCount after zero: %v, %v", ok, err)
	}
	count, id, _ := strings.Cut(rdb.Get(ctx, ks.Marker).Val(), " ")
	if count != "2" || id == "" {
		t.Fatalf("the marker is %q, want the count first set and the call's id", rdb.Get(ctx, ks.Marker).Val())
	}
	if v := set(2, id); v != 1 {
		t.Fatalf("TrySetCount's call resent: %d, want 1", v)
	}
	if v := set(3, "call-1"); v != 0 {
		t.Fatalf("the first latch's call resent on the second latch: %d, want 0", v)
	}
	if ok, err := l.TrySetCount(ctx, 2, 30*time.Second); err != nil || ok {
		t.Fatalf("the handle's next TrySetCount: %v, %v; want false", ok, err)
	}
	rdb.Del(ctx, ks.Count, ks.Downs, ks.Marker)
}

// A latch is shared with Redisson: dlock publishes Redisson's "1" on a new
// count and "0" at zero on Redisson's channel, and a count-down made as
// Redisson makes it (DECR, DEL and "0" at zero) on a latch Redisson set
// (no TTL) wakes dlock's Wait. Locks skips a latch Redisson armed (no
// marker), and Inspect reads locks only.
func TestLatchSharedWithRedisson(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	c := newClient(t, shared, withRecheck(time.Minute))
	const name = "permanent:latch:redisson" // a Redisson latch has no TTL
	ks := keys.Latch(name)
	ps := rdb.Subscribe(ctx, ks.Channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	l := c.CountDownLatch(name)
	if ok, err := l.TrySetCount(ctx, 1, 30*time.Second); err != nil || !ok {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	if m, err := ps.ReceiveMessage(ctx); err != nil || m.Payload != "1" {
		t.Fatalf("TrySetCount published %v (%v), want Redisson's \"1\"", m, err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := ps.ReceiveMessage(ctx); err != nil || m.Payload != "0" {
		t.Fatalf("the last count-down published %v (%v), want Redisson's \"0\"", m, err)
	}
	rdb.Set(ctx, name, 2, 0) // as Redisson's trySetCount(2)
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	waitSubscribers(t, rdb, ks.Channel, 2)
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if d := rdb.PTTL(ctx, ks.Downs).Val(); d <= 0 || d > kind.LatchDownsTTL {
		t.Fatalf("the count-downs' set of a latch without a TTL lives %v", d)
	}
	if infos, err := c.Locks(ctx, "permanent:latch:*"); err != nil || len(infos) != 0 {
		t.Fatalf("Locks with Redisson's latch in Redis (no marker): %+v, %v", infos, err)
	}
	if _, err := c.Inspect(ctx, name); !errors.Is(err, ErrNotLock) {
		t.Fatalf("Inspect of a latch: %v, want ErrNotLock", err)
	}
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { // Redisson's countDown
		p.Decr(ctx, name)
		p.Del(ctx, name)
		p.Publish(ctx, ks.Channel, "0")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	awaitNil(t, done, 100*time.Millisecond, "Redisson's last count-down did not wake Wait")
	rdb.Del(ctx, ks.Downs)
}

// Close wakes a waiting Wait with ErrClosed, and later calls fail with it.
func TestLatchCloseEndsWait(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	c := newClient(t, shared, withRecheck(time.Minute))
	l := c.CountDownLatch("latch:close")
	if _, err := l.TrySetCount(ctx, 1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	defer rdb.Del(ctx, "latch:close")
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	waitSubscribers(t, rdb, keys.Latch("latch:close").Channel, 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait returned %v at Close, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not end Wait")
	}
	if err := l.Wait(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
}
