package dlock

import (
	"context"
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

// semScripts runs the semaphore scripts on s's keys the way the library
// sends them, so that a test can send one call twice (a resend after a lost
// reply) at the moment of its choosing.
type semScripts struct {
	t   *testing.T
	rdb *redis.Client
	s   *Semaphore
}

func newSemScripts(t *testing.T, name string, size int) *semScripts {
	c := newClient(t, shared)
	s := c.Semaphore(name, size)
	ks := s.p.Keys()
	rdb := rdbFor(t, shared)
	rdb.Del(ctxT(t), ks.Permits, ks.Size, ks.Queue, ks.Seen)
	t.Cleanup(func() { rdb.Del(context.Background(), ks.Permits, ks.Size, ks.Queue, ks.Seen) })
	return &semScripts{t: t, rdb: rdb, s: s}
}

// acquire is sem_acquire.lua for permit id with a TTL of 30 s, queue entry
// entry ("" = do not queue), a queue TTL of 12 s and the given claim window.
func (x *semScripts) acquire(id, entry, standing string, claim time.Duration) []int64 {
	x.t.Helper()
	v, err := x.rdb.Eval(ctxT(x.t), semLua("sem_acquire.lua"), semKeys(x.s), id, x.s.p.Size(), 30000, entry, 12000, claim.Milliseconds(), standing).Int64Slice()
	if err != nil {
		x.t.Fatal(err)
	}
	return v
}

func (x *semScripts) release(id string, claim time.Duration) {
	x.t.Helper()
	if err := x.rdb.Eval(ctxT(x.t), semLua("sem_release.lua"), semKeys(x.s), id, claim.Milliseconds(), x.s.p.Keys().Free).Err(); err != nil {
		x.t.Fatal(err)
	}
}

func (x *semScripts) leave(entry, id string) int64 {
	x.t.Helper()
	n, err := x.rdb.Eval(ctxT(x.t), semLua("sem_leave.lua"), semKeys(x.s), entry, id, 2000).Int64()
	if err != nil {
		x.t.Fatal(err)
	}
	return n
}

func (x *semScripts) queue() []string {
	return x.rdb.LRange(ctxT(x.t), x.s.p.Keys().Queue, 0, -1).Val()
}

// A new waiter's first queueing call ('0'), resent after a grant took its
// entry out of the queue while another waiter queued behind it, reports the
// permit: it does not queue the waiter again beside the permit it holds
// (which would later hand the same permit out a second time, and let a
// waiter that leaves keep its permit until its TTL).
func TestSemaphoreResentFirstQueueingAfterGrant(t *testing.T) {
	const claim = 2 * time.Second
	t.Run("handed over by a release", func(t *testing.T) {
		x := newSemScripts(t, "sem:resent-first:handoff", 1)
		if r := x.acquire("a:1", "", "0", claim); r[0] != 1 {
			t.Fatalf("A's acquire answered %v", r)
		}
		w, v := keys.QueueEntry(1, 30000, "w:1"), keys.QueueEntry(2, 30000, "v:1")
		if r := x.acquire("w:1", w, "0", claim); r[0] != 0 { // its reply is lost
			t.Fatalf("W's first queueing call answered %v", r)
		}
		if r := x.acquire("v:1", v, "0", claim); r[0] != 0 {
			t.Fatalf("V's first queueing call answered %v", r)
		}
		x.release("a:1", claim)              // hands the permit to W for the claim window
		r := x.acquire("w:1", w, "0", claim) // the resend
		if q := x.queue(); len(q) != 1 || q[0] != v {
			t.Fatalf("queue after W's resent call = %q, want only V's entry: W queued beside its permit", q)
		}
		if r[0] != 1 || r[1] != 30000 {
			t.Fatalf("W's resent call answered %v, want {1, 30000} (the permit it was handed)", r)
		}
		// W's caller gone, its Undo gives the permit back: V gets it.
		if n := x.leave(w, "w:1"); n != 1 {
			t.Fatalf("W's leave answered %d, want 1 (its permit given back)", n)
		}
		if got := x.rdb.ZRange(ctxT(t), x.s.p.Keys().Permits, 0, -1).Val(); len(got) != 1 || got[0] != "v:1" {
			t.Fatalf("permits after W left: %v, want V's", got)
		}
	})
	t.Run("taken by the call itself", func(t *testing.T) {
		// The first call found the queue empty and a permit free: it queued
		// and took the permit at once.
		x := newSemScripts(t, "sem:resent-first:self", 1)
		w, v := keys.QueueEntry(1, 30000, "w:1"), keys.QueueEntry(2, 30000, "v:1")
		if r := x.acquire("w:1", w, "0", claim); r[0] != 1 { // its reply is lost
			t.Fatalf("W's first call answered %v", r)
		}
		if r := x.acquire("v:1", v, "0", claim); r[0] != 0 {
			t.Fatalf("V's first queueing call answered %v", r)
		}
		r := x.acquire("w:1", w, "0", claim) // the resend
		if q := x.queue(); len(q) != 1 || q[0] != v {
			t.Fatalf("queue after W's resent call = %q, want only V's entry: W queued beside its permit", q)
		}
		if r[0] != 1 {
			t.Fatalf("W's resent call answered %v, want {1, 30000} (the permit it took)", r)
		}
		if n := x.leave(w, "w:1"); n != 1 {
			t.Fatalf("W's leave answered %d, want 1 (its permit given back)", n)
		}
	})
}

// The grant mark an entry leaves in the seen set when granted lives in a
// set with a TTL, and goes once its permit's deadline at grant has passed:
// the next queueing call that extends the set drops it.
func TestSemaphoreGrantMarks(t *testing.T) {
	t.Run("handed over", func(t *testing.T) {
		const claim = 50 * time.Millisecond
		x := newSemScripts(t, "sem:marks:handoff", 1)
		ks := x.s.p.Keys()
		if r := x.acquire("a:1", "", "0", claim); r[0] != 1 {
			t.Fatalf("A's acquire answered %v", r)
		}
		w, v := keys.QueueEntry(1, 30000, "w:1"), keys.QueueEntry(2, 30000, "v:1")
		x.acquire("w:1", w, "0", claim)
		x.acquire("v:1", v, "0", claim)
		x.release("a:1", claim)
		if s, err := x.rdb.ZScore(ctxT(t), ks.Seen, w).Result(); err != nil || s >= 0 {
			t.Fatalf("W's seen score after the hand-off: %v %v, want a mark (negative)", s, err)
		}
		if r := x.acquire("w:1", w, "h", claim); r[0] != 1 {
			t.Fatalf("W's claim answered %v", r)
		}
		time.Sleep(2 * claim)
		if r := x.acquire("v:1", v, "1", claim); r[0] != 0 { // W holds: V queues
			t.Fatalf("V's re-check answered %v", r)
		}
		if err := x.rdb.ZScore(ctxT(t), ks.Seen, w).Err(); err != redis.Nil {
			t.Fatalf("W's mark after its deadline and V's re-check: %v, want none", err)
		}
		if s := x.rdb.ZScore(ctxT(t), ks.Seen, v).Val(); s <= 0 {
			t.Fatalf("V's deadline: %v", s)
		}
	})
	t.Run("taken by the first call itself", func(t *testing.T) {
		x := newSemScripts(t, "sem:marks:self", 1)
		ks := x.s.p.Keys()
		w := keys.QueueEntry(1, 30000, "w:1")
		if r := x.acquire("w:1", w, "0", 2*time.Second); r[0] != 1 {
			t.Fatalf("W's first call answered %v", r)
		}
		if s, err := x.rdb.ZScore(ctxT(t), ks.Seen, w).Result(); err != nil || s >= 0 {
			t.Fatalf("W's seen score: %v %v, want a mark (negative)", s, err)
		}
		// The first call made the set: it lives as long as the permit.
		if ttl := x.rdb.PTTL(ctxT(t), ks.Seen).Val(); ttl < 29*time.Second {
			t.Fatalf("the seen set lives %v more, want the permit's 30s", ttl)
		}
	})
}
