package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/kind"
)

// A TrySetCount whose reply was lost is resent by go-redis or the wire. When
// the count it set was counted down to zero before the resend lands (the
// workers were quick), the resend must not arm the latch again: its caller
// then Waits on a count nobody will count down, and the latch never opens
// (until its TTL). The resend answers true, as the call did, and leaves the
// latch open.
func TestLatchResendAfterZeroDoesNotRearm(t *testing.T) {
	ctx := ctxT(t)
	rdb := rdbFor(t, shared)
	c := newClient(t, shared)
	const name = "latch:resend-after-zero"
	ks := keys.Latch(name)
	defer rdb.Del(ctx, ks.Count, ks.Downs, ks.Marker)
	set := func() int64 {
		t.Helper()
		v, err := rdb.Eval(ctx, kind.Source("latch_set.lua"), []string{ks.Count, ks.Marker, ks.Downs}, 2, 30000, ks.Channel, "call-1").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := set(); v != 1 {
		t.Fatalf("TrySetCount's call: %d, want 1", v)
	}
	l := c.CountDownLatch(name)
	for range 2 {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if v := set(); v != 1 {
		t.Errorf("TrySetCount's call resent after the latch opened: %d, want 1", v)
	}
	if n, err := l.Count(ctx); err != nil || n != 0 {
		t.Fatalf("the resent TrySetCount armed the opened latch again: count %d (%v), want 0", n, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := l.Wait(wctx); err != nil {
		t.Fatalf("Wait after the latch opened: %v", err)
	}
}
