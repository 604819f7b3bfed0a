package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Redisson's habit (a lease left to expire, never unlocked) is supported:
// the Client's next lock call drops the expired hold (dropLost), and so
// does the hold's end when a lock call already waits at the handle's gate.
// Before, nothing dropped it then: that waiter waited until its ctx ended
// while another Client took and released the free lock.
func TestGateWaiterIsLetInWhenTheHoldIsLeftToExpire(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	tctx := ctxT(t)
	m := c.Mutex("habit:gate")
	// Goroutine A: lock with a 300ms lease, never unlock.
	a := context.WithValue(tctx, workerKey{}, "A")
	if ok, err := m.TryLock(a, 0, 300*time.Millisecond); !ok || err != nil {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	// Goroutine B locks meanwhile and waits at the gate.
	b := context.WithValue(tctx, workerKey{}, "B")
	bctx, cancel := context.WithTimeout(b, 3*time.Second)
	defer cancel()
	if err := m.Lock(bctx); err != nil {
		t.Fatalf("B's Lock of a lock whose hold expired: %v (it waited behind A's expired lease)", err)
	}
	if err := m.Unlock(b); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(a); !errors.Is(err, ErrLockLost) {
		t.Fatalf("A's late Unlock: %v, want its loss", err)
	}
}

// A holds with a fixed lease and never unlocks; B, another goroutine of
// the Client, waits at the handle's gate. An operator's ForceUnlock takes
// A's hold away before its lease ends: A is told (ErrForced), Redis holds
// nothing, and B is let in at once, as when A's lease runs out. With only
// a lease's end letting B in (edeea66), B waited until its own ctx ended.
func TestForcedHoldLetsTheGateWaiterIn(t *testing.T) {
	r := testenvRedis(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r)
	other := newClient(t, r)
	tctx := ctxT(t)
	const name = "gatewaiter:forced"
	const lease = time.Second
	m := c.Mutex(name)
	a := context.WithValue(tctx, workerKey{}, "A")
	if ok, err := m.TryLock(a, 0, lease); !ok || err != nil {
		t.Fatalf("A's TryLock: %v %v", ok, err)
	}
	locked := time.Now()
	doneA := m.Done() // A's lease's
	b := context.WithValue(tctx, workerKey{}, "B")
	bctx, cancel := context.WithTimeout(b, 4*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- m.Lock(bctx) }()
	time.Sleep(100 * time.Millisecond) // B at the gate

	if ok, err := other.Mutex(name).ForceUnlock(tctx); !ok || err != nil {
		t.Fatalf("ForceUnlock: %v %v", ok, err)
	}
	select {
	case <-doneA:
	case <-time.After(time.Second):
		t.Fatal("A was not told of the force")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("B's Lock: %v after %v (the lock was free in Redis from %v: exists=%d)",
				err, time.Since(locked).Round(time.Millisecond), 100*time.Millisecond, rdb.Exists(tctx, name).Val())
		}
		t.Logf("B got the lock %v after A's lock", time.Since(locked).Round(time.Millisecond))
		_ = m.Unlock(b)
	case <-time.After(lease + time.Second):
		t.Errorf("B still waits at the gate %v after A's lock (lease %v), the key exists=%d in Redis",
			time.Since(locked).Round(time.Millisecond), lease, rdb.Exists(tctx, name).Val())
		t.Logf("B's Lock finally: %v", <-got)
	}
	if err := m.Unlock(a); !errors.Is(err, ErrForced) {
		t.Errorf("A's late Unlock: %v, want its loss, ErrForced", err)
	}
}

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
