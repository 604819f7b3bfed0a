package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A hold past its MaxHold is told while Redis still holds it; a holder that
// stops within moments releases it ("unless released meanwhile, the lock
// then expires", MaxHold), and a goroutine of the Client waiting at the
// handle's gate gets it at once. Only a fixed lease's end lets that waiter
// in without the holder's Unlock: when every loss did (0a62e78), the lost
// lease was finished first, the holder's release found it finished and sent
// nothing, and the lock stayed in Redis for its TTL, the waiter with it.
func TestMaxHoldReleaseWithAGateWaiter(t *testing.T) {
	r := testenvRedis(t)
	rdb := rdbFor(t, r)
	ctx := ctxT(t)
	c := newClient(t, r, WithWatchdogTimeout(3*time.Second))
	const name = "gatewaiter:maxhold-release"

	first := make(chan error, 1)
	stopped := make(chan time.Time, 1)
	field := make(chan string, 1)
	go func() {
		first <- c.WithLock(ctx, name, func(fctx context.Context) error {
			field <- c.Mutex(name).Owner()
			<-fctx.Done()
			time.Sleep(50 * time.Millisecond) // the holder takes a moment to stop
			stopped <- time.Now()
			return nil
		}, MaxHold(400*time.Millisecond))
	}()
	time.Sleep(100 * time.Millisecond) // first holds
	entered := make(chan time.Time, 1)
	second := make(chan error, 1)
	go func() {
		second <- c.WithLock(ctx, name, func(context.Context) error {
			entered <- time.Now()
			return nil
		})
	}()

	err := <-first
	if !errors.Is(err, ErrMaxHold) {
		t.Fatalf("first WithLock: %v, want its MaxHold loss", err)
	}
	stop := <-stopped
	f := <-field
	if rdb.HExists(ctx, name, f).Val() {
		t.Errorf("after the first holder's WithLock returned (its release done) its hold %q is still in Redis, PTTL %v",
			f, rdb.PTTL(ctx, name).Val())
	}
	select {
	case at := <-entered:
		if d := at.Sub(stop); d > 500*time.Millisecond {
			t.Errorf("the waiting goroutine got the lock %v after the holder stopped and released", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the lock")
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}

// The same with Lock/Unlock and WithMaxHold: the holder's Unlock, right
// after its Done, answers the loss and releases the lock in Redis.
func TestMaxHoldUnlockWithAGateWaiter(t *testing.T) {
	r := testenvRedis(t)
	rdb := rdbFor(t, r)
	ctx := ctxT(t)
	c := newClient(t, r, WithWatchdogTimeout(3*time.Second), WithMaxHold(400*time.Millisecond))
	const name = "gatewaiter:maxhold-unlock"
	m := c.Mutex(name)
	holder := context.WithValue(ctx, workerKey{}, "holder")
	if err := m.Lock(holder); err != nil {
		t.Fatal(err)
	}
	f := m.Owner()
	waiter := context.WithValue(ctx, workerKey{}, "waiter")
	got := make(chan error, 1)
	go func() { got <- m.Lock(waiter) }()
	<-m.Done()
	time.Sleep(50 * time.Millisecond)
	stop := time.Now()
	if err := m.Unlock(holder); !errors.Is(err, ErrMaxHold) {
		t.Fatalf("holder's Unlock: %v, want its loss", err)
	}
	if rdb.HExists(ctx, name, f).Val() {
		t.Errorf("after the holder's Unlock its hold %q is still in Redis, PTTL %v", f, rdb.PTTL(ctx, name).Val())
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(stop); d > 500*time.Millisecond {
		t.Errorf("the waiter got the lock %v after the holder's Unlock", d)
	}
	_ = m.Unlock(waiter)
}

// Close releases the Client's holds for the others, also with a goroutine
// waiting at the handle's gate. When every loss let such a waiter in
// (0a62e78), Close's loss finished the lease before Close's own release of
// it took its turn: that release sent nothing, and the lock stayed in Redis
// for its TTL.
func TestCloseReleasesAHoldWithAGateWaiter(t *testing.T) {
	r := testenvRedis(t)
	rdb := rdbFor(t, r)
	ctx := ctxT(t)
	left := 0
	const rounds = 10
	for i := range rounds {
		c := newClient(t, r)
		name := "gatewaiter:close:" + string(rune('a'+i))
		m := c.Mutex(name)
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		f := m.Owner()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		waited := make(chan error, 1)
		go func() { waited <- m.Lock(wctx) }()
		time.Sleep(50 * time.Millisecond) // at the gate
		if err := c.Close(); err != nil {
			t.Logf("Close: %v", err)
		}
		if rdb.HExists(ctx, name, f).Val() {
			left++
			t.Logf("round %d: after Close the closed Client's hold %q is still in Redis, PTTL %v", i, f, rdb.PTTL(ctx, name).Val())
		}
		<-waited
		cancel()
		rdb.Del(ctx, name)
	}
	if left > 0 {
		t.Errorf("%d of %d Closes left the Client's hold in Redis", left, rounds)
	}
}
