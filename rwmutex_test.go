package dlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

func TestRWReadersShareWriterExcludes(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	r1, r2 := a.RWMutex("rw:share"), b.RWMutex("rw:share")
	if err := r1.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := r2.TryRLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("second reader: %v, %v", ok, err)
	}
	if r1.RToken() == 0 || r2.RToken() <= r1.RToken() {
		t.Fatalf("read tokens %d, %d: want increasing", r1.RToken(), r2.RToken())
	}
	w := b.RWMutex("rw:share")
	if ok, err := w.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("writer while readers hold: %v, %v", ok, err)
	}
	rdb := rdbFor(t, r)
	h, _ := rdb.HGetAll(ctx, "rw:share").Result()
	if h["mode"] != "read" || h[r1.r.Owner()] != "1" || h[r2.r.Owner()] != "1" || len(h) != 3 {
		t.Fatalf("hash while read-held = %v", h)
	}
	if err := r1.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := w.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("writer on a free lock: %v, %v", ok, err)
	}
	h, _ = rdb.HGetAll(ctx, "rw:share").Result()
	if h["mode"] != "write" || h[w.w.Owner()] != "1" || len(h) != 2 {
		t.Fatalf("hash while write-held = %v (Redisson's layout: mode, <owner>:write)", h)
	}
	if w.Token() <= r2.RToken() {
		t.Fatal("write token not above the read tokens")
	}
	if ok, err := r1.TryRLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("reader while a writer holds: %v, %v", ok, err)
	}
	if ok, err := a.RWMutex("rw:share").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("second writer: %v, %v", ok, err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r1.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("write Unlock by a reader-only handle = %v", err)
	}
}

func TestRWDowngradeAndUpgrade(t *testing.T) {
	r := testenvRedis(t)
	c, other := newClient(t, r), newClient(t, r)
	ctx := ctxT(t)
	rw := c.RWMutex("rw:grade")
	wctx, err := rw.WriteContext(ctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	rctx, err := rw.ReadContext(wctx, 0, 0) // downgrade: the writer reads too
	if err != nil {
		t.Fatalf("downgrade RLock: %v", err)
	}
	if err := rw.Unlock(wctx); err != nil {
		t.Fatal(err)
	}
	if rctx.Err() != nil {
		t.Fatalf("the read hold's context ended with the write hold: %v", context.Cause(rctx))
	}
	// Now a plain reader: others may read, nobody may write.
	o := other.RWMutex("rw:grade")
	if ok, err := o.TryRLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("reader after the downgrade: %v, %v", ok, err)
	}
	if ok, err := other.RWMutex("rw:grade").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("writer after the downgrade: %v, %v", ok, err)
	}
	// Upgrade: refused at once, before any network call.
	resetCounts(t, ctx, r)
	start := time.Now()
	if ok, err := rw.TryLock(rctx, 10*time.Second, 0); ok || !errors.Is(err, ErrUpgrade) {
		t.Fatalf("upgrade TryLock = %v, %v; want ErrUpgrade", ok, err)
	}
	if err := rw.Lock(rctx); !errors.Is(err, ErrUpgrade) {
		t.Fatalf("upgrade Lock = %v; want ErrUpgrade", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("upgrade refused after %v", d)
	}
	if n := commands(t, r)["evalsha"]; n != 0 {
		t.Fatalf("an upgrade sent %d scripts", n)
	}
	for _, x := range []*RWMutex{rw, o} {
		if err := x.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := rw.Lock(ctx); err != nil { // once the read holds are gone
		t.Fatal(err)
	}
	if err := rw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A reader that stops renewing (a fixed lease stands in for a crash) loses
// its share at its own deadline while another reader keeps its own; a
// writer waiting only for the crashed reader gets in at that deadline.
func TestRWCrashedReaderExpiresAlone(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	live := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	crashed := newClient(t, r)
	cr := crashed.RWMutex("rw:crash")
	if ok, err := cr.TryRLock(ctx, 0, 400*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	lr := live.RWMutex("rw:crash")
	if err := lr.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(900 * time.Millisecond) // three watchdog timeouts, past the crashed lease
	wc := newClient(t, r, withRecheck(time.Minute))
	if ok, err := wc.RWMutex("rw:crash").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("writer while the live reader holds: %v, %v", ok, err)
	}
	h, _ := rdb.HGetAll(ctx, "rw:crash").Result()
	if _, ok := h[cr.r.Owner()]; ok {
		t.Fatalf("the crashed reader's share outlived its deadline: %v", h)
	}
	if h[lr.r.Owner()] != "1" || lr.r.Err() != nil {
		t.Fatalf("the live reader's share was cut: %v, %v", h, lr.r.Err())
	}
	if err := lr.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A writer that waits only for a crashed reader is let in at its deadline,
	// with no message and long before its re-check.
	if err := cr.RUnlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("RUnlock after the lease = %v, want ErrLockLost", err)
	}
	if ok, err := crashed.RWMutex("rw:crash").TryRLock(ctx, 0, 300*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	start := time.Now()
	w := wc.RWMutex("rw:crash")
	if err := w.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("writer waited %v for a reader with a 300ms lease", d)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A renewal that comes after a reader's own deadline passed (server clock)
// finds the share over, though no script has purged it yet (another
// reader keeps the hash alive): it answers GONE, the holder declares its
// read hold lost, and the share is not revived. So does an RExtend of a
// fixed lease that comes too late.
func TestRWLateRenewalOfExpiredReaderIsLost(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	const name = "rw:late-renewal"
	rd := c.RWMutex(name)
	if err := rd.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, r).RWMutex(name)
	if ok, err := other.TryRLock(ctx, 0, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// The share's deadline passes before its next renewal reaches Redis
	// (as after a pause of the holder or a slow network): it is moved into
	// the past on the server's clock, and nothing else runs on the lock.
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	readers, owner := keys.For(name).Readers, rd.r.Owner()
	if n, err := rdb.ZAddXX(ctx, readers, redis.Z{Score: float64(now.UnixMilli() - 1), Member: owner}).Result(); err != nil || n != 0 {
		t.Fatal(n, err)
	}
	select {
	case <-rd.r.Done():
	case <-time.After(2 * time.Second):
		d, _ := rdb.ZScore(ctx, readers, owner).Result()
		t.Fatalf("a read share renewed after its deadline passed is still held: Err %v, its deadline %v ms from now",
			publicErr(rd.r.Err()), int64(d)-time.Now().UnixMilli())
	}
	if err := publicErr(rd.r.Err()); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Err of the expired reader = %v, want ErrLockLost", err)
	}
	if d, err := rdb.ZScore(ctx, readers, owner).Result(); err == nil && d > float64(now.UnixMilli()) {
		t.Fatalf("the expired share's deadline was moved on to %v (server clock was %d)", d, now.UnixMilli())
	}
	if err := rd.RUnlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("RUnlock of the expired share = %v, want ErrLockLost", err)
	}
	if h, _ := rdb.HGetAll(ctx, name).Result(); h[other.r.Owner()] != "1" || len(h) != 2 {
		t.Fatalf("the lock after the expired share's RUnlock: %v, want the other reader's share alone", h)
	}
	if n, err := rdb.ZAddXX(ctx, readers, redis.Z{Score: float64(now.UnixMilli() - 1), Member: other.r.Owner()}).Result(); err != nil || n != 0 {
		t.Fatal(n, err)
	}
	if err := other.RExtend(ctx, time.Minute); !errors.Is(err, ErrLockLost) {
		t.Fatalf("RExtend of a fixed lease past its deadline = %v, want ErrLockLost", err)
	}
	if err := other.RUnlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("RUnlock after the late RExtend = %v, want ErrLockLost", err)
	}
	if n := rdb.Exists(ctx, name, readers).Val(); n != 0 {
		t.Fatalf("%d of the lock's keys are left after both shares ended", n)
	}
}

func TestRWWatchdogCoversBothSides(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	rd, wr := c.RWMutex("rw:wd:read"), c.RWMutex("rw:wd:write")
	if err := rd.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wr.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	rdb := rdbFor(t, r)
	for _, name := range []string{"rw:wd:read", "rw:wd:write"} {
		if n, _ := rdb.Exists(ctx, name).Result(); n != 1 {
			t.Fatalf("%s expired under the watchdog", name)
		}
	}
	if rd.r.Err() != nil || wr.Err() != nil {
		t.Fatalf("holds lost: %v, %v", rd.r.Err(), wr.Err())
	}
	if err := rd.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wr.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.e.Renewals(); n != 0 {
		t.Fatalf("%d renewals left", n)
	}
}

// A writer's release wakes every waiting reader; the last reader's release
// wakes a waiting writer. Re-checks are off: only messages can wake them.
func TestRWWakeups(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	holder := newClient(t, r)
	c := newClient(t, r, withRecheck(time.Minute))
	w := holder.RWMutex("rw:wake")
	if err := w.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 5
	readers := make([]*RWMutex, n)
	rctx := make([]context.Context, n) // a context each: one Client's read holds are told apart by it
	got := make(chan error, n)
	for i := range readers {
		readers[i], rctx[i] = c.RWMutex("rw:wake"), context.WithValue(ctx, ctxName("reader"), i)
		go func() { got <- readers[i].RLock(rctx[i]) }()
	}
	time.Sleep(200 * time.Millisecond) // all subscribed and refused
	start := time.Now()
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("readers woke %v after the write release", d)
	}
	wc := newClient(t, r, withRecheck(time.Minute))
	writer := wc.RWMutex("rw:wake")
	wgot := make(chan error, 1)
	go func() { wgot <- writer.Lock(ctx) }()
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	for i, x := range readers {
		if err := x.RUnlock(rctx[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-wgot; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("writer woke %v after the last read release", d)
	}
	if err := writer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The starvation promise: under a steady stream of overlapping readers (the
// lock is never free), a writer gets in after the reads in progress end.
func TestRWWriterNotStarved(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for i := range 4 {
		c := newClient(t, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 10 * time.Millisecond) // overlap the holds
			for {
				select {
				case <-stop:
					return
				default:
				}
				rw := c.RWMutex("rw:starve")
				if err := rw.RLock(ctx); err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
				time.Sleep(40 * time.Millisecond)
				if err := rw.RUnlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	waitFor(t, "readers streaming", func() bool { return reads.Load() > 20 })
	w := newClient(t, r).RWMutex("rw:starve")
	start := time.Now()
	ok, err := w.TryLock(ctx, 3*time.Second, 0)
	waited := time.Since(start)
	if ok {
		if err := w.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	if !ok || err != nil {
		t.Fatalf("writer starved by readers: %v, %v after %v", ok, err, waited)
	}
	if waited > time.Second {
		t.Fatalf("writer waited %v behind 40ms read holds", waited)
	}
}

// A waiting writer that gives up lets the readers it held back in at once.
func TestRWWriterLeaves(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	a, b := newClient(t, r, withRecheck(time.Minute)), newClient(t, r)
	r1 := a.RWMutex("rw:leave")
	if err := r1.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- a.RWMutex("rw:leave").Lock(wctx) }()
	rdb := rdbFor(t, r)
	waitFor(t, "writer registered", func() bool { n, _ := rdb.ZCard(ctx, r1.p.Keys().Writers).Result(); return n == 1 })
	r2 := b.RWMutex("rw:leave")
	rdone := make(chan error, 1)
	go func() { rdone <- r2.RLock(ctx) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-rdone:
		t.Fatalf("a new reader got in past a waiting writer: %v", err)
	default:
	}
	cancel()
	if err := <-wdone; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	select {
	case err := <-rdone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("the reader was not woken when the writer left")
	}
	for _, x := range []*RWMutex{r1, r2} {
		if err := x.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestContentionRW(t *testing.T) {
	contend(t, func(c *Client, g, i int) familyHold {
		rw := c.RWMutex("hot:rw")
		if (g+i)%3 == 0 {
			return familyHold{l: rw, token: rw.Token}
		}
		return familyHold{l: rw.RLocker(), shared: true}
	})
}

// Close releases read and write holds (a downgraded writer's too).
func TestRWClose(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	c, err := New(rdbFor(t, r))
	if err != nil {
		t.Fatal(err)
	}
	rd, wr := c.RWMutex("rw:close:r"), c.RWMutex("rw:close:w")
	if err := rd.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rd.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, err := wr.WriteContext(ctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := wr.RLock(wctx); err != nil { // downgrade
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdbFor(t, r).Exists(ctx, "rw:close:r", "rw:close:w").Result(); n != 0 {
		t.Fatalf("%d read-write locks still held after Close", n)
	}
}

// ForceUnlock (dlock unlock --force) on a read-write lock wakes its waiters
// at once, not at their next re-check.
func TestForceUnlockWakesRWWaiters(t *testing.T) {
	r := testenvRedis(t)
	a, b := newClient(t, r, withRecheck(time.Minute)), newClient(t, r)
	ctx := ctxT(t)
	if err := a.RWMutex("force-rw").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	reader := b.RWMutex("force-rw")
	got := make(chan error, 1)
	go func() { got <- reader.RLock(ctx) }()
	time.Sleep(200 * time.Millisecond)
	if ok, err := a.Mutex("force-rw").ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	awaitNil(t, got, 10*time.Second, "a reader waiting on a force-unlocked read-write lock was not woken")
	if err := reader.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A writer that downgraded keeps its own deadline among the readers' (where
// rw_purge ends its write hold once it passes). A renewal that comes after
// that deadline passed must not revive the write hold: it is lost, as a
// late reader's is.
func TestRWLateRenewalOfDowngradedWriterIsLost(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	const name = "rw:late-writer"
	rw := c.RWMutex(name)
	wctx, err := rw.WriteContext(ctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.ReadContext(wctx, 0, 0); err != nil { // the downgrade
		t.Fatal(err)
	}
	readers := keys.For(name).Readers
	var writer string
	for _, m := range rdb.ZRange(ctx, readers, 0, -1).Val() {
		if strings.HasSuffix(m, ":write") {
			writer = m
		}
	}
	if writer == "" {
		t.Fatal("the downgraded writer has no deadline among the readers'")
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.ZAddXX(ctx, readers, redis.Z{Score: float64(now.UnixMilli() - 1), Member: writer}).Result(); err != nil || n != 0 {
		t.Fatal(n, err)
	}
	select {
	case <-wctx.Done():
	case <-time.After(2 * time.Second):
		d, _ := rdb.ZScore(ctx, readers, writer).Result()
		t.Fatalf("a downgraded writer renewed after its deadline passed still holds: its deadline %v ms from now",
			int64(d)-time.Now().UnixMilli())
	}
	if err := context.Cause(wctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("the write hold ended with %v, want ErrLockLost", err)
	}
}
