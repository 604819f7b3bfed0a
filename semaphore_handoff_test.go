package dlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

// The common cases of sem_acquire.lua decide nothing they should not: a
// claim after a hand-off message grants only a live permit that is the
// caller's, and a new waiter behind others queues behind them.
func TestSemaphoreHandoffPaths(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	s := c.Semaphore("sem:paths", 1)
	ks := s.p.Keys()
	rdb := rdbFor(t, shared)
	t.Cleanup(func() { rdb.Del(ctx, ks.Permits, ks.Size, ks.Queue, ks.Seen) })
	attempt := func(id, entry, standing string) []int64 {
		t.Helper()
		v, err := rdb.Eval(ctx, semLua("sem_acquire.lua"), semKeys(s), id, 1, 30000, entry, 12000, 2000, standing).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	now := func() int64 {
		t.Helper()
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	setup := func(permits ...redis.Z) {
		t.Helper()
		rdb.Del(ctx, ks.Permits, ks.Size, ks.Queue, ks.Seen)
		rdb.Set(ctx, ks.Size, 1, time.Minute)
		if len(permits) > 0 {
			rdb.ZAdd(ctx, ks.Permits, permits...)
			rdb.PExpire(ctx, ks.Permits, time.Minute)
		}
	}

	t.Run("claim of a permit whose claim window ran out", func(t *testing.T) {
		// w:1 was handed the permit and did not claim it in time; a release
		// that counted only live permits gave the permit to q:1 meanwhile,
		// and nothing reaped w:1's. The late claim must not bring it back.
		n := now()
		setup(redis.Z{Score: float64(n - 500), Member: "w:1"}, redis.Z{Score: float64(n + 30000), Member: "q:1"})
		if r := attempt("w:1", keys.QueueEntry(9, 30000, "w:1"), "h"); r[0] != 0 {
			t.Fatalf("late claim answered %v: granted a permit that had expired", r)
		}
		if _, err := rdb.ZScore(ctx, ks.Permits, "w:1").Result(); err != redis.Nil {
			t.Fatalf("the expired permit is still there (or came back): %v", err)
		}
	})
	t.Run("claim of a permit never handed (a forged message)", func(t *testing.T) {
		n := now()
		setup(redis.Z{Score: float64(n + 30000), Member: "q:1"})
		if r := attempt("w:1", keys.QueueEntry(9, 30000, "w:1"), "h"); r[0] != 0 {
			t.Fatalf("claim without a hand-off answered %v", r)
		}
		if got := rdb.ZRange(ctx, ks.Permits, 0, -1).Val(); len(got) != 1 || got[0] != "q:1" {
			t.Fatalf("permits after a forged claim: %v", got)
		}
	})
	t.Run("claim of a handed permit", func(t *testing.T) {
		n := now()
		setup(redis.Z{Score: float64(n + 2000), Member: "w:1"})
		if r := attempt("w:1", keys.QueueEntry(9, 30000, "w:1"), "h"); r[0] != 1 || r[1] != 30000 {
			t.Fatalf("claim answered %v, want {1, 30000}", r)
		}
		// At least the TTL from now, at most the claim window more.
		score := int64(rdb.ZScore(ctx, ks.Permits, "w:1").Val())
		if score < n+30000 || score > now()+32000 {
			t.Fatalf("claimed permit's deadline %d ms from now", score-n)
		}
	})
	t.Run("a new waiter queues behind one already queued", func(t *testing.T) {
		// Nothing is held; a waiter is queued (its re-check will take the
		// permit). A newcomer must not take it first.
		setup()
		first := keys.QueueEntry(1, 30000, "a:1")
		rdb.RPush(ctx, ks.Queue, first)
		rdb.ZAdd(ctx, ks.Seen, redis.Z{Score: float64(now() + 12000), Member: first})
		rdb.PExpire(ctx, ks.Queue, time.Second) // less than half the queue TTL
		rdb.PExpire(ctx, ks.Seen, time.Second)
		second := keys.QueueEntry(2, 30000, "b:1")
		if r := attempt("b:1", second, "0"); r[0] != 0 {
			t.Fatalf("newcomer answered %v: overtook a queued waiter", r)
		}
		if q := rdb.LRange(ctx, ks.Queue, 0, -1).Val(); len(q) != 2 || q[0] != first || q[1] != second {
			t.Fatalf("queue %v", q)
		}
		// The newcomer kept the queue and the deadlines alive.
		for _, k := range []string{ks.Queue, ks.Seen} {
			if ttl := rdb.PTTL(ctx, k).Val(); ttl < 6*time.Second {
				t.Fatalf("%s lives %v more", k, ttl)
			}
		}
		// The queued waiter's own attempt takes the permit.
		if r := attempt("a:1", first, "1"); r[0] != 1 {
			t.Fatalf("first waiter's attempt answered %v", r)
		}
	})
}
