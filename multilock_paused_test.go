package dlock

import (
	"runtime"
	"testing"
	"time"
)

// TryLock's wait bounds the whole call: when it runs out against a Redis
// that accepts and never answers, the members taken are given back in the
// background and TryLock returns at once.
func TestMultiLockTryLockBoundedAgainstPausedRedis(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	c, other := newClient(t, r), newClient(t, r)
	a, b := "ml:paused:a", "ml:paused:b"
	if err := other.Mutex(b).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	ml := c.MultiLock(c.Mutex(a), c.Mutex(b))
	type out struct {
		ok  bool
		err error
		at  time.Time
	}
	got := make(chan out, 1)
	start := time.Now()
	go func() {
		ok, err := ml.TryLock(ctx, 500*time.Millisecond, 0)
		got <- out{ok, err, time.Now()}
	}()
	waitFor(t, "a taken", func() bool { return c.Mutex(a).Token() != 0 })
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	var o out
	select {
	case o = <-got:
	case <-time.After(10 * time.Second):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		_ = r.Resume()
		t.Fatalf("TryLock did not return within 10s\n%s", buf)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if took := o.at.Sub(start); took > 1500*time.Millisecond {
		t.Errorf("TryLock with a 500ms wait returned after %v (%v, %v)", took, o.ok, o.err)
	}
	waitGone(t, c, a, 10*time.Second)
	_ = other.Mutex(b).Unlock(ctx)
}

// SyncLocker's Unlock has no ctx: against a Redis that accepts and never
// answers, it returns once the cleanup timeout bounds the release.
func TestSyncLockerUnlockBoundedAgainstPausedRedis(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithCleanupTimeout(500*time.Millisecond))
	var errs []error
	l := SyncLocker(c.Mutex("ml:sync-paused"), func(err error) { errs = append(errs, err) })
	l.Lock()
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { l.Unlock(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("SyncLocker.Unlock did not return in 5s with a 500ms cleanup timeout")
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	<-done
	if len(errs) == 0 {
		t.Error("onError was not told of the release left to the background")
	}
}
