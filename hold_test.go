package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/keys"
)

// Close ends the holds it releases as losses: a WithLock function still
// running has its context cancelled before anyone else can get the lock.
func TestCloseCancelsRunningWithLock(t *testing.T) {
	c, err := New(rdbFor(t, shared))
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t, shared)
	fnCtx := make(chan context.Context, 1)
	result := make(chan error, 1)
	go func() {
		result <- c.WithLock(context.Background(), "close-running", func(ctx context.Context) error {
			fnCtx <- ctx
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	fctx := <-fnCtx
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	// The moment another owner gets the lock, fn must already have been told.
	m := other.Mutex("close-running")
	if err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if fctx.Err() == nil {
		t.Fatal("another owner got the lock while fn's context was still live")
	}
	mustUnlock(t, m)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-result; !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrClosed) {
		t.Fatalf("WithLock = %v, want fn's cause: ErrLockLost and ErrClosed", err)
	}
}

// A panic in fn releases the lock before it propagates.
func TestWithLockPanicReleases(t *testing.T) {
	c := newClient(t, shared)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = c.WithLock(ctxT(t), "panic", func(context.Context) error { panic("boom") })
	}()
	if l, _ := c.Mutex("panic").IsLocked(ctxT(t)); l {
		t.Fatal("lock still held after a panic in fn")
	}
	if c.e.Renewals() != 0 {
		t.Fatal("renewal still running after a panic in fn")
	}
}

// A spinning waiter gives up with ErrClosed when its client closes.
func TestSpinWaiterStopsOnClose(t *testing.T) {
	holder := newClient(t, shared)
	h := holder.Mutex("spin-close")
	mustLock(t, h)
	c, err := New(rdbFor(t, shared), WithSpin(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- c.Mutex("spin-close").Lock(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("spinning Lock after Close = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("spinning waiter ignored Close")
	}
	mustUnlock(t, h)
}

// Re-entering a hold that was declared lost fails with the loss, instead of
// quietly extending a hold that nothing renews.
func TestReentryAfterLossFails(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	m := c.Mutex("reenter-lost")
	hctx := lockCtx(t, m)
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	<-m.Done()
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(context.WithoutCancel(hctx)); !errors.Is(err, ErrLockLost) {
		t.Fatalf("re-entry of a lost hold = %v, want ErrLockLost", err)
	}
	_ = m.Unlock(ctxT(t))
}

// When Redis has more holds than the handle knew (a re-entry whose reply was
// lost), the "final" Unlock leaves the hold running and renewed.
func TestUnlockWithHiddenHoldKeepsRenewing(t *testing.T) {
	c := newClient(t, shared, WithWatchdogTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	m := c.Mutex("hidden-hold")
	mustLock(t, m)
	rdbFor(t, shared).HIncrBy(ctx, "hidden-hold", m.Owner(), 1)
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // three watchdog timeouts
	if n, _ := m.HoldCount(ctx); n != 1 {
		t.Fatalf("hidden hold count = %d after 3 TTLs, want it kept alive at 1", n)
	}
	if m.Err() != nil {
		t.Fatal(m.Err())
	}
	mustUnlock(t, m)
}

// A hand-off is only a wake-up: the waiter's own attempt confirms it, and
// that attempt gives the hold in Redis the lease the caller asked for, so
// the deadline the holder trusts is Redis's, not the claim window's. A
// waiter that comes too late for its claim does not get the lock.
func TestHandoffConfirmedWithTheFullLease(t *testing.T) {
	r := testenvRedis(t)
	a := newClient(t, r, WithHandoffClaim(300*time.Millisecond))
	b := newClient(t, r)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	h := a.Mutex("handoff-lease")
	mustLock(t, h)
	w := b.Mutex("handoff-lease")
	got := make(chan error, 1)
	go func() {
		ok, err := w.TryLock(ctx, 10*time.Second, 8*time.Second)
		if err == nil && !ok {
			err = errors.New("not acquired")
		}
		got <- err
	}()
	waitFor(t, "waiter queued", func() bool { n, _ := rdb.LLen(ctx, w.p.Keys().Queue).Result(); return n == 1 })
	mustUnlock(t, h)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, "handoff-lease").Val(); ttl < 7*time.Second {
		t.Fatalf("the handed-off hold has %v in Redis, want the 8s lease", ttl)
	}
	if last, err := rdb.Get(ctx, w.p.Keys().Fence).Uint64(); err != nil || w.Token() != last {
		t.Fatalf("token %d, Redis's counter %d (%v)", w.Token(), last, err)
	}
	mustUnlock(t, w)

	// A waiter that never confirms (its process died, its message was
	// lost) holds the hand-off for the claim window only.
	mustLock(t, h)
	late := w.testHold()
	entry := keys.QueueEntry(1, 8000, late.field())
	if _, err := late.attemptRaw(ctx, 8*time.Second, 0, entry, false); err != nil {
		t.Fatal(err)
	}
	mustUnlock(t, h) // hands the lock to the entry, for the 300ms claim
	if owner := rdb.HKeys(ctx, "handoff-lease").Val(); len(owner) != 1 || owner[0] != late.field() {
		t.Fatalf("not handed to the queued entry: %v", owner)
	}
	time.Sleep(400 * time.Millisecond)
	if n := rdb.Exists(ctx, "handoff-lease").Val(); n != 0 {
		t.Fatal("an unclaimed hand-off outlived its claim window")
	}
}

// Close keeps to its budget when Redis does not answer: it does not wait for
// a hanging renewal, and its releases give up at WithCloseTimeout. (go-redis
// itself may hold a call up to its dial and read timeouts; this client's are
// short so that only dlock's own waiting is measured.)
func TestCloseIsBoundedWhenRedisHangs(t *testing.T) {
	r := testenvRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { rdb.Close() })
	c, err := New(rdb, WithWatchdogTimeout(600*time.Millisecond), WithCloseTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Mutex("close-hang")
	mustLock(t, m)
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	time.Sleep(300 * time.Millisecond) // a renewal is now in flight, hanging
	done := m.Done()
	start := time.Now()
	_ = c.Close() // may report the release that could not be sent
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Close took %v with a 500ms budget", took)
	}
	select {
	case <-done:
	default:
		t.Fatal("holder not told that Close ended its hold")
	}
}
