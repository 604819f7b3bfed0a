package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// One script call renews many held locks: 300 locks held by one client cost
// one call per renewal, each carrying at least 100 of them.
func TestWatchdogRenewsInBatches(t *testing.T) {
	r := testenvRedis(t)
	// A 1s period: locks taken within half of it share a beat even when a
	// loaded machine takes a while to acquire all 300.
	c := newClient(t, r, WithWatchdogTimeout(3*time.Second))
	ctx := ctxT(t)
	const n = 300
	ms := make([]*Mutex, n)
	for i := range ms {
		ms[i] = c.Mutex(fmt.Sprintf("batch:%d", i))
		mustLock(t, ms[i])
	}
	resetCounts(t, ctx, r)
	time.Sleep(2200 * time.Millisecond) // two renewal periods
	s := commands(t, r)
	calls, checks := s["evalsha"], s["hexists"]
	// Every third of the 3s timeout: two renewals of each lock in 2.2s
	// (a renewal every half would make one).
	if calls == 0 || checks < 2*n {
		t.Fatalf("%d calls renewed %d locks in 2.2s, want every lock renewed twice", calls, checks)
	}
	if per := checks / calls; per < 100 {
		t.Fatalf("renewal carried %d locks per call (%d calls, %d checks), want >= 100", per, calls, checks)
	}
	for _, m := range ms {
		if m.Err() != nil {
			t.Fatalf("%s lost: %v", m.Name(), m.Err())
		}
		mustUnlock(t, m)
	}
	if c.e.Renewals() != 0 {
		t.Fatalf("%d renewals left after every Unlock", c.e.Renewals())
	}
	// No renewal may follow the last Unlock.
	resetCounts(t, ctx, r)
	time.Sleep(1200 * time.Millisecond)
	if s := commands(t, r); s["hexists"] != 0 || s["pexpire"] != 0 {
		t.Fatalf("renewals after Unlock: %v", s)
	}
}

// A renewal costs Redis HEXISTS + PEXPIRE per lock; the record of long
// holds (Inspect's held-for) is written at a hold's first renewal and every
// keys.HeldEvery after, not at each, which would cost four times as much.
func TestRenewalCost(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	ctx := ctxT(t)
	const n = 50
	ms := make([]*Mutex, n)
	for i := range ms {
		ms[i] = c.Mutex(fmt.Sprintf("renewcost:%d", i))
		mustLock(t, ms[i])
	}
	waitFor(t, "every hold's first renewal", func() bool {
		info, err := c.Inspect(ctx, ms[n-1].Name())
		return err == nil && len(info.Holders) == 1 && info.Holders[0].HeldFor > 0
	})
	resetCounts(t, ctx, r)
	time.Sleep(2 * time.Second) // about 20 renewals of each lock
	s := commands(t, r)
	renewals, inner := s["hexists"], int64(0)
	for _, cmd := range []string{"hexists", "pexpire", "hsetnx", "hset", "hget", "hlen", "hkeys", "hdel", "pttl"} {
		inner += s[cmd]
	}
	if renewals < 5*n {
		t.Fatalf("%d renewals of %d locks in 2s at a 100ms period", renewals, n)
	}
	if per := float64(inner) / float64(renewals); per > 2.6 {
		t.Fatalf("%.2f commands per lock per renewal (%v), want about 2", per, s)
	}
	for _, m := range ms {
		mustUnlock(t, m)
	}
}

// A pause shorter than the watchdog timeout is ridden out: renewal retries and
// the hold survives.
func TestWatchdogRidesOutPause(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(2*time.Second))
	m := c.Mutex("pause-short")
	mustLock(t, m)
	time.Sleep(700 * time.Millisecond) // past the first renewal
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := m.Err(); err != nil {
		t.Fatalf("hold lost across a short pause: %v", err)
	}
	if l, err := m.IsLocked(ctxT(t)); !l || err != nil {
		t.Fatalf("IsLocked = %v, %v", l, err)
	}
	mustUnlock(t, m)
}

// When Redis cannot confirm the hold for a whole timeout, the holder declares
// it lost on its own clock, without waiting for Redis to answer.
func TestWatchdogDeclaresLossOnDeadline(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(600*time.Millisecond))
	var lostCtx context.Context
	started := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- c.WithLock(context.Background(), "pause-long", func(ctx context.Context) error {
			lostCtx = ctx
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	<-started
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("WithLock returned %v, want ErrLockLost", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("loss not declared while Redis was paused")
	}
	if !errors.Is(context.Cause(lostCtx), ErrLockLost) {
		t.Fatalf("fn's ctx cause = %v", context.Cause(lostCtx))
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
}

// Renewal that finds another owner (here: the key deleted and retaken)
// declares the hold lost at once.
func TestWatchdogDeclaresLossWhenNotYours(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r, WithWatchdogTimeout(300*time.Millisecond))
	other := newClient(t, r)
	ctx := ctxT(t)
	m := c.Mutex("stolen")
	mustLock(t, m)
	if err := rdbFor(t, r).Del(ctx, "stolen").Err(); err != nil {
		t.Fatal(err)
	}
	thief := other.Mutex("stolen")
	mustLock(t, thief)
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("loss not declared")
	}
	if !errors.Is(m.Err(), ErrLockLost) {
		t.Fatalf("Err = %v", m.Err())
	}
	if err := m.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock of a lost hold = %v", err)
	}
	if n, _ := thief.HoldCount(ctx); n != 1 {
		t.Fatal("the loser's Unlock touched the new holder")
	}
	mustUnlock(t, thief)
}
