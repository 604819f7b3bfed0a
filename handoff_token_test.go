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
func TestHandoffTokenAfterTheSequenceEnded(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	ks := keys.ForMutex("tok:seq-ended")
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
	tokW, err := rdb.Eval(ctx, acq, k, "W:1", 30000, 0, fenceTTL, "7 30000 W:1", "1", 60000, "0", 2000).Int64()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("A token %d, hand-off issued %d, W's claim returned %d", tokA, handed, tokW)
	if tokW <= tokA {
		t.Errorf("W granted with token %d, not above A's %d", tokW, tokA)
	}
}
