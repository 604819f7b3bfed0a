package dlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
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

// A waiter whose ctx ends while its attempt waits, unsent, behind other
// calls of its Client (the wire drops it: Droppable) must still leave the
// queue: nothing undid it, and its entry, alive for the queue TTL, stood
// first in the queue, so the permits freed went to a waiter long gone (or,
// for a waiter that does not fit, held back every waiter behind it).
func TestSemaphoreDroppedAttemptLeavesTheQueue(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	const name = "sem:dropped-attempt"
	holder, err := newClient(t, r).Semaphore(name, 1).Acquire(ctx, 0, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cw := newClient(t, r, WithClientID("waiter-w"), withRecheck(time.Second))
	sw := cw.Semaphore(name, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		p, err := sw.Acquire(wctx, time.Minute, 10*time.Second)
		if p != nil {
			_ = p.Release(context.Background())
		}
		got <- err
	}()
	waitSemQueued(t, rdb, name, 1)
	// Redis stops answering; calls of cw fill its lone connections and its
	// batcher, and the waiter's next re-check queues behind them, unsent.
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	var blockers sync.WaitGroup
	for range 8 {
		blockers.Add(1)
		go func() {
			defer blockers.Done()
			bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer bcancel()
			_, _ = cw.Semaphore("sem:dropped-attempt-other", 1).Available(bctx)
		}()
	}
	// The waiter re-checks within a second: its attempt queues behind them.
	time.Sleep(1300 * time.Millisecond)
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Acquire did not return once its ctx ended")
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	blockers.Wait()
	ks := keys.Semaphore(name)
	// The entry, refreshed a second at most before the pause, would live
	// four re-check intervals: a second after the resume, it must be gone.
	deadline := time.Now().Add(time.Second)
	for {
		entries := rdb.LRange(ctx, ks.Queue, 0, -1).Val()
		if len(entries) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter left, its entry stays queued: %q", entries)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = holder.Release(ctx)
}
