package dlock

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's side of the protocol, written from its documented rules: acquire
// when the hash is absent or holds our field (counting up and setting the
// TTL), else answer the PTTL; release by counting down, deleting at zero and
// publishing 0 on redisson_lock__channel:{name}. Made at first use, not at
// init: go-redis hashes a script with crypto/sha1, which would stop the test
// binary at start under GODEBUG=fips140=only (TestFIPS140Only).
var (
	redissonAcquire = sync.OnceValue(func() *redis.Script {
		return redis.NewScript(`
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`)
	})
	redissonRelease = sync.OnceValue(func() *redis.Script {
		return redis.NewScript(`
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if n > 0 then redis.call('pexpire', KEYS[1], ARGV[1]); return 0 end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1`)
	})
)

const javaOwner = "3f2a9c4e-0000-4000-8000-000000000001:57"

func TestRedissonInterop(t *testing.T) {
	for _, name := range []string{"shared-with-java", "order:{42}:pay"} {
		t.Run(name, func(t *testing.T) { testRedissonInterop(t, name) })
	}
}

func testRedissonInterop(t *testing.T, name string) {
	r := testenvRedis(t)
	c := newClient(t, r, withRecheck(time.Minute)) // wake-ups must come from messages
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	// Redisson's prefixName: braces only around names without a '{'.
	channel := "redisson_lock__channel:{" + name + "}"
	if strings.Contains(name, "{") {
		channel = "redisson_lock__channel:" + name
	}
	javaLock := func() (bool, error) {
		err := redissonAcquire().Run(ctx, rdb, []string{name}, 30000, javaOwner).Err()
		if err == redis.Nil {
			return true, nil
		}
		return false, err
	}
	javaUnlock := func() {
		t.Helper()
		if err := redissonRelease().Run(ctx, rdb, []string{name, channel}, 30000, javaOwner).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Java holds: dlock sees it and waits; Java's release wakes the Go waiter.
	if ok, err := javaLock(); !ok {
		t.Fatalf("Redisson side could not take a free lock: %v", err)
	}
	m := c.Mutex(name)
	if ok, err := m.TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("dlock took a lock Redisson holds: %v, %v", ok, err)
	}
	got := make(chan error, 1)
	go func() { got <- m.Lock(ctx) }()
	waitFor(t, "Go waiter queued", func() bool { n, _ := rdb.LLen(ctx, m.p.Keys().Queue).Result(); return n == 1 })
	javaUnlock()
	awaitNil(t, got, 10*time.Second, "Redisson's release did not wake the dlock waiter")

	// Go holds: Redisson sees it; dlock's release wakes a Redisson waiter.
	if ok, _ := javaLock(); ok {
		t.Fatal("Redisson took a lock dlock holds")
	}
	sub := rdb.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscription confirmed
		t.Fatal(err)
	}
	mustUnlock(t, m)
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != "0" {
		t.Fatalf("Redisson waiter got %v, %v; want message 0", msg, err)
	}
	if ok, err := javaLock(); !ok {
		t.Fatalf("Redisson could not take the lock after dlock's release: %v", err)
	}
	javaUnlock()
}
