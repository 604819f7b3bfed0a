package dlock

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Spin mode keeps the semantics without pub/sub: exclusion under contention,
// a wait that runs out, and not a single SUBSCRIBE.
func TestSpinMode(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	var inside atomic.Int32
	var wg sync.WaitGroup
	for range 3 {
		c := newClient(t, r, WithSpin(time.Millisecond, 16*time.Millisecond))
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					m := c.Mutex("spin")
					if err := m.Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						t.Error("two holders")
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					if err := m.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	c := newClient(t, r, WithSpin(time.Millisecond, 16*time.Millisecond))
	holder := c.Mutex("spin")
	mustLock(t, holder)
	start := time.Now()
	if ok, err := c.Mutex("spin").TryLock(ctx, 100*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("TryLock on a held lock = %v, %v", ok, err)
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Fatal("gave up before the wait ended")
	}
	mustUnlock(t, holder)
	s := commands(t, r)
	// The backoff doubles from 1ms to 16ms: a 100ms wait costs about ten
	// attempts, where a fixed 1ms poll would cost about a hundred.
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	mustLock(t, holder)
	if ok, err := c.Mutex("spin").TryLock(ctx, 100*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("TryLock on a held lock = %v, %v", ok, err)
	}
	if n := commands(t, r)["evalsha"]; n > 30 {
		t.Fatalf("%d scripts in a 100ms spin wait: the backoff does not grow", n)
	}
	mustUnlock(t, holder)
	if s["subscribe"] != 0 || s["rpush"] != 0 {
		t.Fatalf("spin mode used pub/sub or the queue: %v", s)
	}
}
