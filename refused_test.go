package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// A reply is a grant only when Redis made it. These tests put the Client in
// front of a Redis that refuses it (a wrong password, no password, a
// database that does not exist, an ACL user without scripting or without
// the keys, a full memory, a replica) and call every primitive, on one
// goroutine (the lone connection) and on eight (the batcher), with the
// Client's own connection on and off. No call may report a grant, and each
// error must name what Redis said.

// refusal is a server condition under which no lock can be granted.
type refusal struct {
	name string
	// want is what the error must say (Redis' error code, or one of its
	// alternatives, separated by |).
	want string
	// grants: Redis may still grant under the condition (a script whose
	// first write may not grow memory runs under OOM), so a grant is a lie
	// only when Redis does not hold it.
	grants bool
	// dial returns the go-redis options of a client facing the condition.
	dial func(t *testing.T) *redis.Options
}

func refusals() []refusal {
	return []refusal{
		{"wrong-password", "WRONGPASS", false, func(t *testing.T) *redis.Options {
			r := startWithPassword(t, "right")
			return &redis.Options{Addr: r.Addr(), Password: "wrong"}
		}},
		// Redis answers an unauthenticated command of more than ten
		// arguments with a protocol error and closes the connection: the
		// calls pipelined behind it see it closed.
		{"no-auth", "NOAUTH|unauthenticated|EOF|connection reset", false, func(t *testing.T) *redis.Options {
			r := startWithPassword(t, "right")
			return &redis.Options{Addr: r.Addr()}
		}},
		{"db-out-of-range", "DB index is out of range", false, func(t *testing.T) *redis.Options {
			return &redis.Options{Addr: shared.Addr(), DB: 99}
		}},
		{"acl-no-scripting", "NOPERM", false, func(t *testing.T) *redis.Options {
			r := testenv.StartRedis(t)
			mustDo(t, r, "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "&*", "+@all", "-@scripting")
			return &redis.Options{Addr: r.Addr(), Username: "noscript", Password: "pw"}
		}},
		{"acl-no-keys", "NOPERM", false, func(t *testing.T) *redis.Options {
			r := testenv.StartRedis(t)
			mustDo(t, r, "ACL", "SETUSER", "nokeys", "on", ">pw", "~elsewhere:*", "&*", "+@all")
			return &redis.Options{Addr: r.Addr(), Username: "nokeys", Password: "pw"}
		}},
		{"oom", "OOM", true, func(t *testing.T) *redis.Options {
			r := testenv.StartRedis(t)
			fillMemory(t, r)
			return &redis.Options{Addr: r.Addr()}
		}},
		{"replica", "READONLY", false, func(t *testing.T) *redis.Options {
			m := testenv.StartRedis(t)
			return &redis.Options{Addr: testenv.StartReplica(t, m).Addr()}
		}},
	}
}

// startWithPassword starts a redis-server that asks for password (set once
// it runs: testenv's readiness check does not authenticate).
func startWithPassword(t *testing.T, password string) *testenv.Redis {
	t.Helper()
	r := testenv.StartRedis(t)
	mustDo(t, r, "CONFIG", "SET", "requirepass", password)
	return r
}

func mustDo(t *testing.T, r *testenv.Redis, args ...any) {
	t.Helper()
	if _, err := r.Do(context.Background(), args...); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// fillMemory puts r over its memory limit, with noeviction: 4 MB of data,
// then a limit of 1 MB, so that every write that may grow memory is refused
// with OOM however the server's own use moves meanwhile.
func fillMemory(t *testing.T, r *testenv.Redis) {
	t.Helper()
	ctx := context.Background()
	mustDo(t, r, "CONFIG", "SET", "maxmemory", "0")
	rdb := r.NewClient(t)
	blob := strings.Repeat("x", 64<<10)
	for i := range 64 {
		mustNil(t, rdb.Set(ctx, fmt.Sprintf("permanent:fill:%d", i), blob, 0).Err())
	}
	mustDo(t, r, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	mustDo(t, r, "CONFIG", "SET", "maxmemory", "1mb")
	if err := rdb.Set(ctx, "permanent:probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("a write with memory full: %v, want OOM", err)
	}
}

// grantOp is one call of the public API. run reports a lie when the call
// told its caller it holds (or did) what Redis does not hold: holds asks
// Redis, through a client of the test's, whether a key exists.
type grantOp struct {
	name string
	// writesOnly: the call writes nothing when its key does not exist, so
	// a Redis that refuses writes (a replica, a full memory) answers it
	// truthfully with success.
	writesOnly bool
	run        func(ctx context.Context, c *Client, k string, holds func(...string) bool) (lie bool, err error)
}

func grantOps() []grantOp {
	// Long enough for go-redis' own retries of a READONLY reply to end.
	const wait = time.Second
	return []grantOp{
		{"Mutex.TryLock", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			ok, err := c.Mutex(k).TryLock(ctx, 0, 0)
			return ok && !holds(k), err
		}},
		{"Mutex.TryLock/wait", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			ok, err := c.Mutex(k).TryLock(ctx, wait, time.Minute)
			return ok && !holds(k), err
		}},
		{"Mutex.Lock", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			err := c.Mutex(k).Lock(ctx)
			return err == nil && !holds(k), err
		}},
		{"FairMutex.TryLock", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			ok, err := c.FairMutex(k).TryLock(ctx, wait, 0)
			return ok && !holds(k), err
		}},
		{"RWMutex.TryLock", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			ok, err := c.RWMutex(k).TryLock(ctx, wait, 0)
			return ok && !holds(k), err
		}},
		{"RWMutex.TryRLock", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			ok, err := c.RWMutex(k).TryRLock(ctx, wait, 0)
			return ok && !holds(k), err
		}},
		{"Semaphore.Acquire", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			p, err := c.Semaphore(k, 3).Acquire(ctx, wait, 0)
			return p != nil && !holds(keys.Semaphore(k).Permits), err
		}},
		{"Semaphore.AcquireN", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			p, err := c.Semaphore(k, 3).AcquireN(ctx, 2, wait, 0)
			return p != nil && !holds(keys.Semaphore(k).Permits), err
		}},
		{"MultiLock.TryLock", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			ok, err := c.MultiLock(c.Mutex(k+"-a"), c.Mutex(k+"-b")).TryLock(ctx, wait, 0)
			return ok && !holds(k+"-a", k+"-b"), err
		}},
		{"WithLock", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			lie := false
			err := c.WithLock(ctx, k, func(context.Context) error { lie = !holds(k); return nil }, WaitTime(wait))
			return lie || (err == nil && lie), err
		}},
		{"Election.Campaign", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			ctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			lctx, err := c.Election(k).Campaign(ctx, "me")
			return (lctx != nil || err == nil) && !holds(keys.Election(k).Lock), err
		}},
		{"CountDownLatch.TrySetCount", false, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			_, err := c.CountDownLatch(k).TrySetCount(ctx, 2, time.Minute)
			return err == nil && !holds(k), err
		}},
		{"CountDownLatch.CountDown", true, func(ctx context.Context, c *Client, k string, holds func(...string) bool) (bool, error) {
			return false, c.CountDownLatch(k).CountDown(ctx)
		}},
	}
}

// TestFaultRefusedNeverGrants is the matrix: every refusal × every primitive ×
// one and eight goroutines × the Client's own connection on and off.
func TestFaultRefusedNeverGrants(t *testing.T) {
	calls0, lies0 := refusedCalls.Load(), refusedLies.Load()
	for _, rf := range refusals() {
		t.Run(rf.name, func(t *testing.T) {
			opt := rf.dial(t)
			holds := func(...string) bool { return false }
			if rf.grants {
				holds = existsOn(t, opt)
			}
			for _, own := range []bool{true, false} {
				rdb := redis.NewClient(withoutNotices(opt))
				t.Cleanup(func() { _ = rdb.Close() })
				c := newClientOn(t, rdb, WithOwnConnection(own))
				for _, op := range grantOps() {
					if op.writesOnly && (rf.name == "replica" || rf.grants) {
						continue
					}
					for _, g := range []int{1, 8} {
						lies, bad := runRefused(c, fmt.Sprint(own), op, g, rf.want, rf.grants, holds)
						if lies > 0 || bad != nil {
							t.Errorf("own=%v %s ×%d: %d false grants; error: %v", own, op.name, g, lies, bad)
						}
					}
				}
			}
		})
	}
	recordReliability(t, reliabilityRow{
		Scenario: "Redis refuses the Client",
		Faults: fmt.Sprintf("%d conditions (wrong password, NOAUTH, DB 99, ACL user without scripting, ACL user without the keys, OOM, a replica as the address) × %d calls of every primitive × 1 and 8 goroutines × own connection on and off",
			len(refusals()), len(grantOps())),
		Grants: 0,
		Signal: -1,
		Notes: fmt.Sprintf("%d calls; %d reported a grant Redis did not make (cf1ff77: 21–24 of 24 per call at 8 goroutines); every error names Redis' refusal",
			refusedCalls.Load()-calls0, refusedLies.Load()-lies0),
	})
}

// saysAny reports whether err's text holds one of the |-separated wants.
func saysAny(err error, wants string) bool {
	for _, w := range strings.Split(wants, "|") {
		if strings.Contains(err.Error(), w) {
			return true
		}
	}
	return false
}

func withoutNotices(opt *redis.Options) *redis.Options {
	o := *opt
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return &o
}

// existsOn returns a check, through a client of the test's own on opt's
// server, that every key given exists.
func existsOn(t *testing.T, opt *redis.Options) func(...string) bool {
	admin := redis.NewClient(withoutNotices(&redis.Options{Addr: opt.Addr}))
	t.Cleanup(func() { _ = admin.Close() })
	return func(ks ...string) bool {
		n, err := admin.Exists(context.Background(), ks...).Result()
		return err == nil && int(n) == len(ks)
	}
}

// refusedCalls and refusedLies count the calls runRefused made, and those
// that reported what Redis does not hold, for RELIABILITY.md.
var refusedCalls, refusedLies atomic.Int64

// runRefused runs op on g goroutines, three rounds each, and returns how
// many calls reported what Redis does not hold, and the first error that
// does not say want (when mayGrant, a call may also succeed).
func runRefused(c *Client, prefix string, op grantOp, g int, want string, mayGrant bool, holds func(...string) bool) (lies int, bad error) {
	var n atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				lie, err := op.run(ctx, c, fmt.Sprintf("refused-%s-%s-%d-%d-%d", prefix, op.name, g, i, round), holds)
				cancel()
				refusedCalls.Add(1)
				if lie {
					n.Add(1)
					refusedLies.Add(1)
				}
				if (err == nil && !mayGrant) || (err != nil && !saysAny(err, want)) {
					mu.Lock()
					if bad == nil {
						bad = fmt.Errorf("%v (want an error saying %q)", err, want)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return int(n.Load()), bad
}

// TestRefusedAfterPasswordChange: the password changes while the Client
// holds a lock and its connections are cut. Unlock and Extend must fail
// (the key stays), and no new grant may be reported.
func TestRefusedAfterPasswordChange(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(fmt.Sprintf("own=%v", own), func(t *testing.T) {
			r := startWithPassword(t, "old")
			rdb := redis.NewClient(withoutNotices(&redis.Options{Addr: r.Addr(), Password: "old"}))
			t.Cleanup(func() { _ = rdb.Close() })
			c := newClientOn(t, rdb, WithOwnConnection(own))
			ctx := ctxT(t)
			m := c.Mutex("pw-held")
			if ok, err := m.TryLock(ctx, 0, time.Minute); !ok || err != nil {
				t.Fatal(ok, err)
			}
			admin := redis.NewClient(withoutNotices(&redis.Options{Addr: r.Addr(), Password: "old"}))
			t.Cleanup(func() { _ = admin.Close() })
			if err := admin.ConfigSet(ctx, "requirepass", "new").Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
				t.Fatal(err)
			}
			if err := m.Extend(ctx, time.Minute); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
				t.Errorf("Extend after the password changed: %v, want a WRONGPASS error", err)
			}
			for _, op := range grantOps() {
				for _, g := range []int{1, 8} {
					if lies, bad := runRefused(c, "", op, g, "WRONGPASS", false, func(...string) bool { return false }); lies > 0 || bad != nil {
						t.Errorf("%s ×%d: %d false grants; error: %v", op.name, g, lies, bad)
					}
				}
			}
			err := m.Unlock(ctx)
			if n, _ := admin.Exists(ctx, "pw-held").Result(); n == 1 && err == nil {
				t.Errorf("Unlock returned nil while the lock stays in Redis")
			}
			if !errors.Is(err, ErrReleaseFailed) || !strings.Contains(err.Error(), "WRONGPASS") {
				t.Errorf("Unlock after the password changed: %v, want ErrReleaseFailed with WRONGPASS", err)
			}
			// The hold's ctx ends; the key expires by its TTL.
			if err := admin.Del(ctx, "pw-held").Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestUnlockUnderOOM: a lock held when memory fills up. Unlock either
// releases it or says it failed; it never reports success while the
// owner's field stays.
func TestUnlockUnderOOM(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(fmt.Sprintf("own=%v", own), func(t *testing.T) {
			r := testenv.StartRedis(t)
			c := newClient(t, r, WithOwnConnection(own))
			ctx := ctxT(t)
			admin := r.NewClient(t)
			for _, kind := range []string{"mutex", "fair", "write", "read", "permit"} {
				name := "oom-" + kind
				var unlock func(context.Context) error
				switch kind {
				case "mutex":
					m := c.Mutex(name)
					mustNil(t, m.Lock(ctx))
					unlock = m.Unlock
				case "fair":
					m := c.FairMutex(name)
					mustNil(t, m.Lock(ctx))
					unlock = m.Unlock
				case "write":
					rw := c.RWMutex(name)
					mustNil(t, rw.Lock(ctx))
					unlock = rw.Unlock
				case "read":
					rw := c.RWMutex(name)
					mustNil(t, rw.RLock(ctx))
					unlock = rw.RUnlock
				case "permit":
					p, err := c.Semaphore(name, 2).Acquire(ctx, time.Second, 0)
					mustNil(t, err)
					unlock = p.Release
				}
				fillMemory(t, r)
				err := unlock(ctx)
				left, lerr := admin.Exists(ctx, name).Result()
				mustNil(t, lerr)
				if err == nil && left == 1 && kind != "permit" {
					t.Errorf("%s: Unlock returned nil while the lock stays in Redis", kind)
				}
				if kind == "permit" && err == nil {
					if n, _ := admin.ZCard(ctx, keys.Semaphore(name).Permits).Result(); n != 0 {
						t.Errorf("permit: Release returned nil while the permit stays in Redis")
					}
				}
				mustDo(t, r, "CONFIG", "SET", "maxmemory", "0")
				mustNil(t, admin.FlushAll(ctx).Err())
			}
		})
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
