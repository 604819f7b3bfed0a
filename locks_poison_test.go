package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// A neighbour's lock-looking hash whose companion key has another type
// (here its fencing counter is a hash: GET answers WRONGTYPE) is one name
// Locks cannot read; it must not cost the caller every other lock.
func TestLocksSurvivesAPoisonedName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rdb := rdbFor(t, shared)
	c := newClient(t, shared)
	const poison, real = "review-poison-b", "review-real-b"
	t.Cleanup(func() { rdb.Del(context.Background(), poison, keys.For(poison).Fence) })
	if err := rdb.HSet(ctx, poison, "host/1/abc:1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, keys.For(poison).Fence, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Expire(ctx, poison, time.Minute)
	rdb.Expire(ctx, keys.For(poison).Fence, time.Minute)
	m := c.Mutex(real)
	if ok, err := m.TryLock(ctx, 0, 30*time.Second); err != nil || !ok {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	defer func() { _ = m.Unlock(context.Background()) }()
	infos, err := c.Locks(ctx, "review-*")
	if err != nil {
		t.Fatalf("Locks: %v (the neighbour's name hid every lock)", err)
	}
	for _, info := range infos {
		if info.Name == real && info.Locked {
			return
		}
	}
	t.Fatalf("Locks did not list the held %s: %+v", real, infos)
}
