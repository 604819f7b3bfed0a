package dlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A grant whose reply came too late to vouch for it is confirmed by a
// renewal first; when that renewal finds the hold gone, the call fails and
// the handle is free again. It stayed taken before: every later lock call
// of the name in that Client waited for a hold nobody had.
func TestFailedConfirmFreesTheHandle(t *testing.T) {
	r := testenvRedis(t)
	rdb := r.NewClient(t)
	proxy := testenv.NewFaultProxy(t, r.Addr())
	prdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = prdb.Close() })
	c := newClientOn(t, prdb)
	ctx := ctxT(t)
	const name = "confirm:gone"
	m := c.Mutex(name)
	// Warm the connections, then slow every reply: the grant of a 300 ms
	// lease arrives 250 ms after Redis made it, past a third of its TTL.
	if ok, err := m.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("warm-up TryLock: %v, %v", ok, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(0, 250*time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := m.TryLockContext(ctx, 0, 300*time.Millisecond)
		done <- err
	}()
	// While the grant's reply is on its way, the hold vanishes.
	waitFor(t, "the grant in Redis", func() bool { return rdb.Exists(ctx, name).Val() == 1 })
	if err := rdb.Del(ctx, name).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("TryLockContext vouched for a hold whose confirmation found it gone")
	}
	proxy.SetLatency(0, 0)
	if ok, err := m.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("TryLock after the failed confirmation: %v, %v (the handle stayed taken)", ok, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
