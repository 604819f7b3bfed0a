package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// rwKeysLeft returns which of the read-write lock's keys (the hash, the
// read deadlines, the waiting writers) exist in Redis. The fencing counter
// is left out: it outlives every hold on purpose.
func rwKeysLeft(t *testing.T, rw *RWMutex) []string {
	t.Helper()
	rdb := rdbFor(t, shared)
	ks := rw.p.Keys()
	var left []string
	for _, k := range []string{ks.Lock, ks.Readers, ks.Writers} {
		n, err := rdb.Exists(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			left = append(left, k)
		}
	}
	return left
}

// A write lock call with the very context a read hold of the same handle
// was taken with (a context that carries no hold: context.Background(), a
// request's) is that reader asking to upgrade. It used to queue as a writer
// and wait for its own read hold until ctx ended, holding every new reader
// back meanwhile; it is refused with ErrUpgrade at once, and nothing of it
// is left in Redis.
func TestRWUpgradeWithPlainContextIsRefused(t *testing.T) {
	c, other := newClient(t, shared), newClient(t, shared)
	const name = "rwupgrade:plain"
	rw := c.RWMutex(name)
	// One plain context for every call below; its timeout bounds a wait
	// that, unfixed, never ends on its own.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := rw.Lock(ctx)
	if took := time.Since(start); !errors.Is(err, ErrUpgrade) || took > time.Second {
		t.Fatalf("Lock after RLock with one context = %v after %v; want ErrUpgrade at once", err, took)
	}
	// The same through the Client's lookup (the same handle), and through
	// the other write calls.
	if err := c.RWMutex(name).Lock(ctx); !errors.Is(err, ErrUpgrade) {
		t.Fatalf("Lock through the Client's lookup = %v; want ErrUpgrade", err)
	}
	if ok, err := rw.TryLock(ctx, time.Second, 0); ok || !errors.Is(err, ErrUpgrade) {
		t.Fatalf("TryLock = %v, %v; want ErrUpgrade", ok, err)
	}
	if ok, err := rw.TryLock(ctx, 0, 0); ok || !errors.Is(err, ErrUpgrade) {
		t.Fatalf("TryLock without a wait = %v, %v; want ErrUpgrade", ok, err)
	}
	if wctx, err := rw.WriteContext(ctx, time.Second, 0); wctx != nil || !errors.Is(err, ErrUpgrade) {
		t.Fatalf("WriteContext = %v, %v; want ErrUpgrade", wctx, err)
	}
	if err := c.WithLock(ctx, name, func(context.Context) error { return nil }, Write()); !errors.Is(err, ErrUpgrade) {
		t.Fatalf("WithLock(Write) = %v; want ErrUpgrade", err)
	}
	// Nothing queued: no writer entry, the hash holds only the read hold,
	// and a new reader of another Client gets in at once.
	rdb := rdbFor(t, shared)
	ks := rw.p.Keys()
	if n, err := rdb.Exists(ctx, ks.Writers).Result(); n != 0 || err != nil {
		w, _ := rdb.ZRangeWithScores(ctx, ks.Writers, 0, -1).Result()
		t.Fatalf("a refused upgrade left waiting writers %v (%v)", w, err)
	}
	h, err := rdb.HGetAll(ctx, ks.Lock).Result()
	if err != nil || len(h) != 2 || h["mode"] != "read" || h[rw.r.Owner()] != "1" {
		t.Fatalf("hash after the refused upgrades = %v, %v; want mode read and the one read hold", h, err)
	}
	o := other.RWMutex(name)
	if ok, err := o.TryRLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("a new reader beside the refused upgrade: %v, %v", ok, err)
	}
	if err := o.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Another caller of the Client, with a context of its own, is no
	// upgrade: it waits for the read hold as any writer does.
	if ok, err := rw.TryLock(context.Background(), 0, 0); ok || err != nil {
		t.Fatalf("a writer with another context = %v, %v; want not acquired, no error", ok, err)
	}
	if err := rw.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if left := rwKeysLeft(t, rw); len(left) != 0 {
		t.Fatalf("keys left after the only hold's release: %v", left)
	}
	// Once the read hold is gone, the same context takes the write side.
	if err := rw.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The same with context.Background() itself, the wait bounded by TryLock's.
func TestRWUpgradeWithBackgroundIsRefused(t *testing.T) {
	c := newClient(t, shared)
	const name = "rwupgrade:background"
	bg := context.Background()
	if err := c.RWMutex(name).RLock(bg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ok, err := c.RWMutex(name).TryLock(bg, 2*time.Second, 0)
	if took := time.Since(start); ok || !errors.Is(err, ErrUpgrade) || took > time.Second {
		t.Fatalf("TryLock(Background) after RLock(Background) = %v, %v after %v; want ErrUpgrade at once", ok, err, took)
	}
	if err := c.RWMutex(name).RUnlock(bg); err != nil {
		t.Fatal(err)
	}
	if left := rwKeysLeft(t, c.RWMutex(name)); len(left) != 0 {
		t.Fatalf("keys left after the refused upgrade and the release: %v", left)
	}
}

// A context that carries the read hold (ReadContext's, or one derived from
// it) is refused as documented: at once, with no script sent and nothing
// queued.
func TestRWUpgradeWithReadContextIsRefused(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	ctx := ctxT(t)
	const name = "rwupgrade:readctx"
	rw := c.RWMutex(name)
	rctx, err := rw.ReadContext(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	type key struct{}
	derived, cancel := context.WithTimeout(context.WithValue(rctx, key{}, 1), 3*time.Second)
	defer cancel()
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, x := range []context.Context{rctx, derived} {
		if err := rw.Lock(x); !errors.Is(err, ErrUpgrade) {
			t.Fatalf("Lock with the read hold's context = %v; want ErrUpgrade", err)
		}
		if ok, err := rw.TryLock(x, time.Second, 0); ok || !errors.Is(err, ErrUpgrade) {
			t.Fatalf("TryLock with the read hold's context = %v, %v; want ErrUpgrade", ok, err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("upgrades refused after %v", took)
	}
	if n := commands(t, r)["evalsha"]; n != 0 {
		t.Fatalf("the refused upgrades sent %d scripts", n)
	}
	if err := rw.RUnlock(rctx); err != nil {
		t.Fatal(err)
	}
	if left := rwKeysLeft(t, rw); len(left) != 0 {
		t.Fatalf("keys left: %v", left)
	}
}

// A downgrade's context (ReadContext with a context that carries the write
// hold) outlives the write hold, but is otherwise a hold context like any
// other: it carries the values and the deadline of the context it was
// asked for with, and ends when that context is cancelled.
func TestRWDowngradeContextKeepsValuesAndDeadline(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	const name = "rwdowngrade:ctx"
	rw := c.RWMutex(name)
	wctx, err := rw.WriteContext(ctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	type key struct{}
	asked, cancel := context.WithTimeout(context.WithValue(wctx, key{}, "request-7"), 700*time.Millisecond)
	defer cancel()
	rctx, err := rw.ReadContext(asked, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v := rctx.Value(key{}); v != "request-7" {
		t.Errorf("downgrade context's value = %v; want the caller's", v)
	}
	want, _ := asked.Deadline()
	if got, ok := rctx.Deadline(); !ok || !got.Equal(want) {
		t.Errorf("downgrade context's deadline = %v, %v; want the caller's %v", got, ok, want)
	}
	if TokenFrom(rctx) == 0 || TokenFrom(rctx) == TokenFrom(wctx) {
		t.Errorf("downgrade context's token = %d (write hold's %d)", TokenFrom(rctx), TokenFrom(wctx))
	}
	if err := rw.Unlock(wctx); err != nil {
		t.Fatal(err)
	}
	if rctx.Err() != nil {
		t.Fatalf("the downgrade's context ended with the write hold: %v", context.Cause(rctx))
	}
	waitDone(t, rctx, 2*time.Second, "the downgrade's context past the caller's deadline")
	if !errors.Is(rctx.Err(), context.DeadlineExceeded) {
		t.Errorf("downgrade context ended with %v; want the caller's deadline", rctx.Err())
	}
	// The hold itself goes on, as any hold does after its context's
	// deadline, until it is released (with the hold's context without its
	// cancellation, to wait for the release's answer).
	if err := rw.RUnlock(context.WithoutCancel(rctx)); err != nil {
		t.Fatal(err)
	}
	if left := rwKeysLeft(t, rw); len(left) != 0 {
		t.Fatalf("keys left: %v", left)
	}

	// The caller's own cancellation ends it too, while the write hold
	// still lasts (once the write hold has ended, so has every context
	// derived from its own).
	wctx, err = rw.WriteContext(ctx, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	asked, cancelAsked := context.WithCancel(wctx)
	rctx, err = rw.ReadContext(asked, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cancelAsked()
	waitDone(t, rctx, 2*time.Second, "the downgrade's context after the caller's cancel")
	if err := rw.Unlock(wctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.RUnlock(context.WithoutCancel(rctx)); err != nil {
		t.Fatal(err)
	}
	if left := rwKeysLeft(t, rw); len(left) != 0 {
		t.Fatalf("keys left: %v", left)
	}
}
