package dlock

import (
	"errors"
	"testing"
	"time"
)

// Lua counts permits in doubles: past 2^53 adding a few permits leaves the
// sum unchanged, so a semaphore of 2^60 permits with 2^60-256 held granted
// 257 more. Sizes Lua cannot count exactly are refused.
func TestSemaphoreHugeSizeNeverOverGrants(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, shared)
	const huge = 1 << 60
	s := c.Semaphore("sem:huge", huge)
	most, err := s.AcquireN(ctx, huge-256, 0, 10*time.Second)
	if err == nil {
		defer func() { _ = most.Release(ctx) }()
		more, err := s.AcquireN(ctx, 257, 0, 10*time.Second)
		if err == nil && more != nil {
			_ = more.Release(ctx)
			t.Fatalf("semaphore of %d permits, %d held, granted 257 more", huge, huge-256)
		}
		return
	}
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("AcquireN(%d): %v, want a permit, or ErrInvalidArgument", huge-256, err)
	}
	if err := c.Semaphore("sem:huge", 5).SetPermits(ctx, huge); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("SetPermits(%d): %v, want ErrInvalidArgument", huge, err)
	}
}
