package dlock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

// ForceUnlock refuses, with ErrNotLock and nothing changed, a key that is
// not a dlock or Redisson lock: another Redis type, or a hash whose fields
// are not owners with integer hold counts (and a read-write lock's mode).
// Before, it deleted a user's {name, email} hash and reported it held, and
// on a string it failed with Redis' raw WRONGTYPE.
func TestForceUnlockRefusesWhatIsNotALock(t *testing.T) {
	r := testenvRedis(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r)
	ctx := ctxT(t)
	for name, write := range map[string]func(k string) error{
		"user:1":         func(k string) error { return rdb.HSet(ctx, k, "name", "ann", "email", "ann@example.com").Err() },
		"hash:ownerlike": func(k string) error { return rdb.HSet(ctx, k, "c1:1", "not a count").Err() },
		"hash:mode":      func(k string) error { return rdb.HSet(ctx, k, "mode", "banana", "c1:1", "1").Err() },
		"hash:mixed":     func(k string) error { return rdb.HSet(ctx, k, "c1:1", "1", "email", "x").Err() },
		"string":         func(k string) error { return rdb.Set(ctx, k, "v", 0).Err() },
		"list":           func(k string) error { return rdb.RPush(ctx, k, "a", "b").Err() },
		"set":            func(k string) error { return rdb.SAdd(ctx, k, "a").Err() },
		"zset":           func(k string) error { return rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: "a"}).Err() },
	} {
		t.Run(name, func(t *testing.T) {
			if err := write(name); err != nil {
				t.Fatal(err)
			}
			rdb.Expire(ctx, name, time.Minute)
			before := rdb.Dump(ctx, name).Val()
			held, err := c.Mutex(name).ForceUnlock(ctx)
			if held || !errors.Is(err, ErrNotLock) {
				t.Fatalf("ForceUnlock = %v, %v; want false, ErrNotLock", held, err)
			}
			if strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("raw Redis error: %v", err)
			}
			if after := rdb.Dump(ctx, name).Val(); after != before {
				t.Fatal("the key was changed")
			}
			if n := rdb.Exists(ctx, keys.For(name).Forced).Val(); n != 0 {
				t.Fatal("a forced set was written")
			}
		})
	}
	// What is a lock is still forced: Redisson's layout (the rw layout and
	// dlock's own holders are forced_test's), and an election's lock with
	// its leader field.
	if err := rdb.HSet(ctx, "redisson", "8743c9c0-0795-4907-87fd-6c719a6b4586:1", "2").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "redisson:rw", "mode", "write", "8743c9c0-0795-4907-87fd-6c719a6b4586:1:write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"redisson", "redisson:rw"} {
		if held, err := c.Mutex(name).ForceUnlock(ctx); !held || err != nil {
			t.Fatalf("ForceUnlock(%q) = %v, %v; want true", name, held, err)
		}
	}
	e := c.Election("leader")
	lctx, err := e.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	if held, err := c.Mutex(keys.Companion(keys.ElectionPrefix, "leader")).ForceUnlock(ctx); !held || err != nil {
		t.Fatalf("ForceUnlock of the election's lock = %v, %v; want true", held, err)
	}
	_ = e.Resign(lctx) // lost already, or about to learn it: either way it ends
}
