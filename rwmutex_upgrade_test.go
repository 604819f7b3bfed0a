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
	resetCounts(t, ctx, r)
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
