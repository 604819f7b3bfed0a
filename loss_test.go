package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Each way a hold can end without Unlock has its own reason, told apart with
// errors.Is (and errors.As for the details), and every one wraps ErrLockLost.
func TestLossReasons(t *testing.T) {
	const wd = 300 * time.Millisecond
	lostWith := func(t *testing.T, m *Mutex, reason error) {
		t.Helper()
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("the hold was not lost (want %v)", reason)
		}
		err := m.Err()
		var le *LossError
		if !errors.Is(err, ErrLockLost) || !errors.Is(err, reason) || !errors.As(err, &le) || le.Reason != reason || le.Name != m.Name() {
			t.Fatalf("Err = %v (%T), want a *LossError for %q with reason %v", err, err, m.Name(), reason)
		}
		if err := m.Unlock(ctxT(t)); !errors.Is(err, reason) {
			t.Fatalf("Unlock after the loss = %v, want %v", err, reason)
		}
	}

	t.Run("unconfirmed: Redis stopped answering", func(t *testing.T) {
		r := testenvRedis(t)
		m := newClient(t, r, WithWatchdogTimeout(wd)).Mutex("loss:paused")
		mustLock(t, m)
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
		}
		if err := r.Resume(); err != nil {
			t.Fatal(err)
		}
		lostWith(t, m, ErrUnconfirmed)
	})
	t.Run("forced", func(t *testing.T) {
		c := newClient(t, shared, WithWatchdogTimeout(wd))
		m := c.Mutex("loss:forced")
		mustLock(t, m)
		if ok, err := newClient(t, shared).Mutex("loss:forced").ForceUnlock(ctxT(t)); !ok || err != nil {
			t.Fatal(ok, err)
		}
		lostWith(t, m, ErrForced)
	})
	t.Run("data lost: FLUSHALL", func(t *testing.T) {
		r := testenvRedis(t)
		m := newClient(t, r, WithWatchdogTimeout(wd)).Mutex("loss:flushed")
		mustLock(t, m)
		if err := rdbFor(t, r).FlushAll(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		lostWith(t, m, ErrDataLost)
	})
	t.Run("data lost: FLUSHALL and granted again at once", func(t *testing.T) {
		// The renewal finds another owner's hold in a new fencing
		// sequence: the token, compared with the sequence's start, says
		// Redis lost ours (ErrTakenOver before renewals carried it).
		r := testenvRedis(t)
		c := newClient(t, r, WithWatchdogTimeout(wd))
		c.e.Hub().Listen()
		<-c.e.Hub().ClientReady()
		m := c.Mutex("loss:flushed-regranted")
		mustLock(t, m)
		if err := rdbFor(t, r).FlushAll(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		other := newClient(t, r).Mutex("loss:flushed-regranted")
		mustLock(t, other)
		lostWith(t, m, ErrDataLost)
		mustUnlock(t, other)
	})
	t.Run("data lost: a read hold, FLUSHALL and a writer at once", func(t *testing.T) {
		r := testenvRedis(t)
		c := newClient(t, r, WithWatchdogTimeout(wd))
		c.e.Hub().Listen()
		<-c.e.Hub().ClientReady()
		rw := c.RWMutex("loss:rw-flushed")
		rctx, err := rw.ReadContext(ctxT(t), time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdbFor(t, r).FlushAll(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		w := newClient(t, r).RWMutex("loss:rw-flushed")
		if err := w.Lock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-rctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the read hold was not lost")
		}
		if err := context.Cause(rctx); !errors.Is(err, ErrDataLost) {
			t.Fatalf("the read hold's context ended with %v, want ErrDataLost", err)
		}
		if err := rw.RUnlock(rctx); !errors.Is(err, ErrDataLost) {
			t.Fatalf("RUnlock after the loss = %v, want ErrDataLost", err)
		}
		if err := w.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("taken over: expired and granted to another", func(t *testing.T) {
		c := newClient(t, shared, WithWatchdogTimeout(wd))
		m := c.Mutex("loss:taken")
		mustLock(t, m)
		// Another owner's field replaces ours, as after an expiry and a grant
		// while this process was paused.
		rdb := rdbFor(t, shared)
		ctx := ctxT(t)
		rdb.Del(ctx, "loss:taken")
		rdb.HSet(ctx, "loss:taken", "someone-else:1", 1)
		rdb.PExpire(ctx, "loss:taken", time.Second)
		lostWith(t, m, ErrTakenOver)
	})
	t.Run("renewal refused", func(t *testing.T) {
		r := testenvRedis(t)
		ctx := ctxT(t)
		admin := rdbFor(t, r)
		if err := admin.Do(ctx, "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: "locker", Password: "pw",
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		t.Cleanup(func() { rdb.Close() })
		c, err := New(rdb, WithWatchdogTimeout(wd))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		m := c.Mutex("loss:refused")
		mustLock(t, m)
		// Scripts are refused from now on (as READONLY or OOM would be).
		if err := admin.Do(ctx, "ACL", "SETUSER", "locker", "-@scripting").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
		}
		var le *LossError
		if err := m.Err(); !errors.As(err, &le) || le.Reason != ErrRenewRefused || !isRedisError(le.Err) {
			t.Fatalf("Err = %v; want ErrRenewRefused wrapping Redis' reply", err)
		}
		admin.Del(ctx, "loss:refused")
	})
	t.Run("lease ended", func(t *testing.T) {
		m := newClient(t, shared).Mutex("loss:lease")
		if ok, err := m.TryLock(ctxT(t), 0, 200*time.Millisecond); !ok || err != nil {
			t.Fatal(ok, err)
		}
		lostWith(t, m, ErrLeaseEnded)
	})
	t.Run("closed", func(t *testing.T) {
		c, err := New(rdbFor(t, shared))
		if err != nil {
			t.Fatal(err)
		}
		m := c.Mutex("loss:closed")
		mustLock(t, m)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		// Err keeps the reason after Close has returned and released the lock.
		var le *LossError
		if err := m.Err(); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrLockLost) || !errors.As(err, &le) {
			t.Fatalf("Err after Close = %v, want a loss wrapping ErrClosed", err)
		}
		if l, _ := newClient(t, shared).Mutex("loss:closed").IsLocked(ctxT(t)); l {
			t.Fatal("Close left the lock held")
		}
	})
}

// A grant that took long to arrive (a cold connection, NOSCRIPT and EVAL
// over a slow link) is renewed on time: its first renewal is counted from
// when the request was sent, like its TTL, so the holder is not told of a
// loss while Redis still holds the lock for it.
func TestSlowGrantIsNotAFalseLoss(t *testing.T) {
	const wd = 600 * time.Millisecond
	c := newClient(t, shared, WithWatchdogTimeout(wd))
	ctx := ctxT(t)
	m := c.Mutex("slow-grant")
	h, ok := m.testEnter(ctx)
	if !ok {
		t.Fatal("gate busy")
	}
	res, err := h.attemptRaw(ctx, wd, 0, "", false)
	if err != nil || res.v[0] != 1 {
		t.Fatal(res, err)
	}
	// The reply arrived 0.7 of the watchdog after the request was sent.
	sent := time.Now().Add(-7 * wd / 10)
	if !h.TestGrant(uint64(res.v[2]), sent) {
		t.Fatal("client closed")
	}
	time.Sleep(2 * wd)
	if err := m.Err(); err != nil {
		t.Fatalf("a slow grant was declared lost: %v", err)
	}
	mustUnlock(t, m)
}

// The holder's own deadline is its TTL less a margin for clock drift (1% of
// the TTL plus 2ms, Redlock's allowance), so it is told before Redis lets the
// lock go to the next holder.
func TestHolderIsToldBeforeTheNextGrant(t *testing.T) {
	a, b := newClient(t, shared), newClient(t, shared)
	ctx := ctxT(t)
	const lease = 400 * time.Millisecond
	m := a.Mutex("drift")
	if ok, err := m.TryLock(ctx, 0, lease); !ok || err != nil {
		t.Fatal(ok, err)
	}
	replied := time.Now() // after the request was sent
	h := m.current(ctx)
	if got, max := h.ValidUntil(), replied.Add(lease-driftMargin(lease)); got.After(max) {
		t.Fatalf("the hold's deadline is %v after the reply, want at most %v", got.Sub(replied), lease-driftMargin(lease))
	}
	toldAt := make(chan time.Time, 1)
	go func() { <-m.Done(); toldAt <- time.Now() }()
	w := b.Mutex("drift")
	if ok, err := w.TryLock(ctx, 5*time.Second, 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	grantedAt := time.Now()
	told := <-toldAt
	if !told.Before(grantedAt) {
		t.Fatalf("the holder was told %v after the next grant", told.Sub(grantedAt))
	}
	t.Logf("the holder was told %v before the next grant", grantedAt.Sub(told))
	_ = m.Unlock(ctx)
	mustUnlock(t, w)
}

// In the lock's last millisecond PTTL reads 0: the waiter tries again at
// once instead of sleeping a whole re-check interval.
func TestWaiterRetriesAtTheEndOfTheTTL(t *testing.T) {
	c := newClient(t, shared)
	hd := &c.Mutex("ttl-end").hd
	if d := hd.TestSleep(lease.Reply{Wait: 0}); d > time.Millisecond {
		t.Fatalf("sleep with PTTL 0 = %v, want at most 1ms", d)
	}
	if d := hd.TestSleep(lease.Reply{Wait: -1}); d != c.cfg.Recheck {
		t.Fatalf("sleep with no TTL = %v, want the re-check interval", d)
	}
}

// Spin mode never panics: a backoff beyond MaxSpinBackoff is refused, and
// the largest one accepted backs off without overflow.
func TestSpinBackoffBounds(t *testing.T) {
	for _, d := range []time.Duration{MaxSpinBackoff + 1, 1 << 62} {
		if _, err := New(rdbFor(t, shared), WithSpin(d, d)); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("WithSpin(%v) = %v, want ErrInvalidArgument", d, err)
		}
	}
	c := newClient(t, shared, WithSpin(MaxSpinBackoff, MaxSpinBackoff))
	holder := newClient(t, shared).Mutex("spin-max")
	mustLock(t, holder)
	// The wait leaves room for a new Client's first answer on a loaded
	// box (50ms once saw none: ErrUnavailable).
	if ok, err := c.Mutex("spin-max").TryLock(ctxT(t), 500*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	mustUnlock(t, holder)
}

func TestInspectNotALock(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	rdb.Set(ctx, "inspect:string", "x", time.Minute)
	if _, err := c.Inspect(ctx, "inspect:string"); !errors.Is(err, ErrNotLock) {
		t.Fatalf("Inspect of a string = %v, want ErrNotLock", err)
	}
}

// A release that finds its field gone after Redis lost its data reports the
// loss, even when another owner's grant has meanwhile started a new fencing
// sequence (so the counter exists again): the sequence began after the
// holder's token was issued, which only a loss of data explains.
func TestReleaseAfterDataLossAndRegrant(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	m := a.Mutex("regrant")
	mustLock(t, m)
	time.Sleep(10 * time.Millisecond)
	if err := rdbFor(t, r).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	other := b.Mutex("regrant")
	mustLock(t, other)
	mustUnlock(t, other)
	if err := m.Unlock(ctx); !errors.Is(err, ErrDataLost) {
		t.Fatalf("Unlock after FLUSHALL and another grant = %v, want ErrDataLost", err)
	}
}

// TestReleaseAfterDataLossAndRegrant with the new grant at once: its
// sequence begins within a millisecond or two of the holder's token, which
// the counter's TTL cannot tell from the holder's own sequence (it reads
// the start to the millisecond, with slack for a reshard); the start kept
// beside the counter (keys.FenceStart) can. Before it was kept, the
// holder's Unlock returned nil here, as for its own release resent.
func TestReleaseAfterDataLossAndRegrantAtOnce(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	// a's channel confirmed first: the renewal of every hold that follows
	// the confirmation would find the flush and tell the holder (the
	// renewal's own report); the test is of the release's.
	a.e.Hub().Listen()
	<-a.e.Hub().ClientReady()
	// b's first contact (script loads, its hub) before the timed part.
	warm := b.Mutex("warm")
	mustLock(t, warm)
	mustUnlock(t, warm)
	var gaps []uint64
	for i := range 10 {
		name := fmt.Sprintf("regrant-at-once-%d", i)
		m := a.Mutex(name)
		mustLock(t, m)
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		other := b.Mutex(name)
		mustLock(t, other)
		gaps = append(gaps, other.Token()-m.Token())
		// The new sequence's first token is kept beside the counter, with
		// the counter's TTL.
		start := keys.FenceStart(keys.For(name).Fence)
		if v, err := rdb.Get(ctx, start).Uint64(); err != nil || v != other.Token() {
			t.Fatalf("%s = %d, %v; want the sequence's first token %d", start, v, err, other.Token())
		}
		// The counter's TTL is read first: the start's, read after it, can
		// only have run down further (the other way round, 4 ms between
		// the reads failed it under load).
		if fttl, ttl := rdb.PTTL(ctx, keys.For(name).Fence).Val(), rdb.PTTL(ctx, start).Val(); ttl <= 0 || ttl > fttl+time.Millisecond {
			t.Fatalf("the start's TTL is %v, the counter's %v", ttl, fttl)
		}
		// Released while the other holds: its release's message would make
		// a's Client check its hold before the Unlock (a renewal, which
		// tells the loss too).
		if err := m.Unlock(ctx); !errors.Is(err, ErrDataLost) {
			t.Fatalf("Unlock after FLUSHALL and another grant %d µs after its token = %v, want ErrDataLost", gaps[i], err)
		}
		mustUnlock(t, other)
	}
	t.Logf("the new sequences began %v µs after the lost holders' tokens", gaps)
}
