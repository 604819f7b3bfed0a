package dlock

import (
	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/wire"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// The fencing sequence ends (its 24h TTL, kept by INCR) between a hand-off
// and the woken waiter's confirming attempt: the attempt starts a new
// sequence, so the waiter's token is still above its predecessor's (it was
// 0, from GET of the missing counter).
// Both ways: a waiter's attempt that finds the hand-off, and the attempt
// that follows a hand-off message ("h"), which checks for it first.
func TestHandoffTokenAfterTheSequenceEnded(t *testing.T) {
	for _, reg := range []string{"1", "h"} {
		t.Run("registered="+reg, func(t *testing.T) { handoffAfterSequenceEnded(t, reg) })
	}
}

func handoffAfterSequenceEnded(t *testing.T, registered string) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	ks := keys.ForMutex("tok:seq-ended:" + registered)
	k := []string{ks.Lock, ks.Fence, ks.Queue}
	acq := wire.WithLib(kind.Source("lib.lua"), kind.Source("acquire.lua"))
	rel := wire.WithLib(kind.Source("lib.lua"), kind.Source("release.lua"))
	const fenceTTL = 300 // stands for the 24h sequence lifetime
	tokA, err := rdb.Eval(ctx, acq, k, "A:1", 30000, 0, fenceTTL).Int64()
	if err != nil {
		t.Fatal(err)
	}
	w, err := rdb.Eval(ctx, acq, k, "W:1", 30000, 0, fenceTTL, "7 30000 W:1", "0", 60000, "0", 2000).Int64()
	if err != nil || w > -2 {
		t.Fatalf("W queued: %d %v", w, err)
	}
	time.Sleep(250 * time.Millisecond)
	rk := []string{ks.Lock, ks.Fence, ks.Queue, ks.Forced}
	if _, err := rdb.Eval(ctx, rel, rk, "A:1", 1, 2000, fenceTTL, tokA).Int64(); err != nil {
		t.Fatal(err)
	}
	handed, _ := rdb.Get(ctx, ks.Fence).Int64()
	time.Sleep(100 * time.Millisecond) // the sequence ends inside the 2s claim window
	tokW, err := rdb.Eval(ctx, acq, k, "W:1", 30000, 0, fenceTTL, "7 30000 W:1", registered, 60000, "0", 2000).Int64()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("A token %d, hand-off issued %d, W's claim returned %d", tokA, handed, tokW)
	if tokW <= tokA {
		t.Errorf("W granted with token %d, not above A's %d", tokW, tokA)
	}
}

// A release takes no token for a waiter whose entry is marked
// (keys.MutexEntry): that waiter's claiming attempt takes it. An unmarked
// entry is an older dlock's waiter, which reads the token the hand-off took
// (GET): the release still takes one for it. Tokens only grow across both.
func TestHandoffTokenMarkedAndOlderWaiters(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	ks := keys.ForMutex("tok:marked")
	k := []string{ks.Lock, ks.Fence, ks.Queue}
	rk := []string{ks.Lock, ks.Fence, ks.Queue, ks.Forced}
	acq := wire.WithLib(kind.Source("lib.lua"), kind.Source("acquire.lua"))
	rel := wire.WithLib(kind.Source("lib.lua"), kind.Source("release.lua"))
	const fenceTTL = 60000
	counter := func() int64 {
		n, err := rdb.Get(ctx, ks.Fence).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tokA, err := rdb.Eval(ctx, acq, k, "A:1", 30000, 0, fenceTTL).Int64()
	if err != nil {
		t.Fatal(err)
	}
	older, marked := "7 30000 W:1", keys.MutexEntry(8, 30000, "X:1")
	for _, q := range []struct{ field, entry string }{{"W:1", older}, {"X:1", marked}} {
		if v, err := rdb.Eval(ctx, acq, k, q.field, 30000, 0, fenceTTL, q.entry, "0", 60000, "0", 2000).Int64(); err != nil || v > -2 {
			t.Fatalf("%s queued: %d %v", q.field, v, err)
		}
	}
	// A hands to the older waiter W, which reads its token with GET.
	if _, err := rdb.Eval(ctx, rel, rk, "A:1", 1, 2000, fenceTTL, tokA).Int64(); err != nil {
		t.Fatal(err)
	}
	tokW := counter()
	if tokW <= tokA {
		t.Fatalf("the hand-off to an older waiter left the counter at %d, not above A's %d", tokW, tokA)
	}
	rdb.PExpire(ctx, ks.Lock, 30*time.Second) // W's claim, as an older dlock makes it
	// W hands to the marked waiter X: no token taken, X's claim takes it.
	if _, err := rdb.Eval(ctx, rel, rk, "W:1", 1, 2000, fenceTTL, tokW).Int64(); err != nil {
		t.Fatal(err)
	}
	if c := counter(); c != tokW {
		t.Fatalf("the hand-off to a marked waiter moved the counter from %d to %d", tokW, c)
	}
	tokX, err := rdb.Eval(ctx, acq, k, "X:1", 30000, 0, fenceTTL, marked, "h", 60000, "0", 2000).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if tokX <= tokW || counter() != tokX {
		t.Fatalf("X claimed with token %d (counter %d), want above W's %d and equal to the counter", tokX, counter(), tokW)
	}
	if ttl, _ := rdb.PTTL(ctx, ks.Lock).Result(); ttl < 29*time.Second {
		t.Fatalf("X's hold has TTL %v after its claim, want its 30s", ttl)
	}
	rdb.Del(ctx, ks.Lock, ks.Fence, ks.Queue)
}
