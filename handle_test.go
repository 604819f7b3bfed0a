package dlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Issue 32, item 2: a handle is a name lookup. Redisson's habit, getLock
// wherever a lock is needed, takes and releases one lock: the handles of
// one name and kind on one Client are the same lock.
func TestHandleRedissonHabit(t *testing.T) {
	c, other := newClient(t, shared), newClient(t, shared)
	ctx := ctxT(t)
	const name = "handle32:habit"
	steps := []struct {
		kind         string
		lock, unlock func(context.Context) error
	}{
		{"Mutex", func(x context.Context) error { return c.Mutex(name).Lock(x) }, func(x context.Context) error { return c.Mutex(name).Unlock(x) }},
		{"FairMutex", func(x context.Context) error { return c.FairMutex(name).Lock(x) }, func(x context.Context) error { return c.FairMutex(name).Unlock(x) }},
		{"RWMutex write", func(x context.Context) error { return c.RWMutex(name).Lock(x) }, func(x context.Context) error { return c.RWMutex(name).Unlock(x) }},
		{"RWMutex read", func(x context.Context) error { return c.RWMutex(name).RLock(x) }, func(x context.Context) error { return c.RWMutex(name).RUnlock(x) }},
	}
	for _, s := range steps {
		if err := s.lock(ctx); err != nil {
			t.Fatalf("%s: Lock: %v", s.kind, err)
		}
		// The hold keeps its handle: a collection between the calls
		// changes nothing.
		runtime.GC()
		if err := s.unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock through a handle looked up again: %v", s.kind, err)
		}
		if info, err := other.Inspect(ctx, name); err != nil || info.Locked {
			t.Fatalf("%s: still locked after Unlock (%v): %+v", s.kind, err, info)
		}
		if err := s.unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("%s: a second Unlock = %v, want ErrNotHeld", s.kind, err)
		}
	}
	m, rw, f := c.Mutex(name), c.RWMutex(name), c.FairMutex(name)
	if c.Mutex(name) != m || c.RWMutex(name) != rw || c.FairMutex(name) != f {
		t.Fatal("two lookups of one name and kind gave two handles")
	}
	if c.Mutex(name) == &c.FairMutex(name).Mutex || c.Mutex(name) == other.Mutex(name) {
		t.Fatal("a Mutex handle is shared across kinds or Clients")
	}
}

// Another goroutine's Unlock through a handle looked up again releases the
// Client's one hold, as sync.Mutex lets any goroutine unlock.
func TestHandleUnlockFromAnotherGoroutine(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	const name = "handle32:goroutines"
	if err := c.Mutex(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- c.Mutex(name).Unlock(context.Background()) }()
	if err := <-got; err != nil {
		t.Fatalf("Unlock from another goroutine: %v", err)
	}
	waitGone(t, c, name, 5*time.Second)
}

// Several read holds and a context that carries none of them: RUnlock
// cannot tell which one is meant. The holds taken with that very context
// are its own; beyond that, RUnlock refuses with ErrAmbiguous and releases
// nothing.
func TestHandleAmbiguousReadUnlock(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	const name = "handle32:readers"
	actx, bctx := context.WithValue(ctx, ctxName("who"), "a"), context.WithValue(ctx, ctxName("who"), "b")
	if err := c.RWMutex(name).RLock(actx); err != nil {
		t.Fatal(err)
	}
	atok := c.RWMutex(name).RToken()
	if err := c.RWMutex(name).RLock(bctx); err != nil {
		t.Fatal(err)
	}
	btok := c.RWMutex(name).RToken()
	err := c.RWMutex(name).RUnlock(ctx)
	if !errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrNotHeld) {
		t.Fatalf("RUnlock with a context of neither read hold = %v, want ErrAmbiguous", err)
	}
	if info, err := c.Inspect(ctx, name); err != nil || len(info.Holders) != 2 {
		t.Fatalf("an ambiguous RUnlock changed the lock (%v): %+v", err, info)
	}
	if err := c.RWMutex(name).RUnlock(actx); err != nil {
		t.Fatalf("RUnlock with the context a's hold was taken with: %v", err)
	}
	if tok := c.RWMutex(name).RToken(); tok != btok || tok == atok {
		t.Fatalf("after a's RUnlock the read hold left has token %d; a's was %d, b's %d", tok, atok, btok)
	}
	// One hold left: a context that carries none releases it.
	if err := c.RWMutex(name).RUnlock(ctx); err != nil {
		t.Fatalf("RUnlock of the one read hold left: %v", err)
	}
	waitGone(t, c, name, 5*time.Second)

	// Two holds taken with one context on the same terms cannot be told
	// apart by their caller: RUnlock releases the most recent, then the
	// other, as sync.RWMutex's RUnlock would.
	for range 2 {
		if err := c.RWMutex(name).RLock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := c.RWMutex(name).RUnlock(ctx); err != nil {
			t.Fatalf("RUnlock %d of two alike holds taken with ctx: %v", i+1, err)
		}
	}
	waitGone(t, c, name, 5*time.Second)

	// On different terms (two fixed leases) they are told apart by what
	// their holders count on: refused.
	for _, lease := range []time.Duration{10 * time.Second, 20 * time.Second} {
		if ok, err := c.RWMutex(name).TryRLock(ctx, 0, lease); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if err := c.RWMutex(name).RUnlock(ctx); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("RUnlock of one of two holds on different terms = %v, want ErrAmbiguous", err)
	}
	if err := c.RWMutex(name).RExtend(ctx, time.Second); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("RExtend of one of two holds = %v, want ErrAmbiguous", err)
	}
	if err := c.Close(); err != nil { // the way out: Close releases both
		t.Fatal(err)
	}
	waitGone(t, newClient(t, shared), name, 5*time.Second)
}

type ctxName string

// The registry forgets the handles nothing refers to: a Client that looked
// up many distinct names keeps none of them once they are unused, and keeps
// the ones that hold a lock.
func TestHandleRegistryForgetsUnusedHandles(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	// Only the hold refers to this handle.
	if err := c.Mutex("handle32:held").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 20000
	func() {
		kept := make([]any, 0, 2*n)
		for i := range n {
			kept = append(kept, c.Mutex(fmt.Sprintf("handle32:many:%d", i)), c.RWMutex(fmt.Sprintf("handle32:many:%d", i)))
		}
		runtime.GC()
		if got := c.handleCount(); got != 2*n+1 {
			t.Fatalf("%d handles registered while %d are referred to", got, 2*n+1)
		}
		runtime.KeepAlive(kept)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for c.handleCount() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d handles still registered after the collections", c.handleCount())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if c.handleCount() != 1 {
		t.Fatal("the registry forgot the handle that holds a lock")
	}
	if err := c.Mutex("handle32:held").Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the held lock through a new lookup: %v", err)
	}
}

// Redisson's other habit: a lock taken with a lease and left to expire.
// The expired hold, which nobody unlocked, does not keep the name from the
// Client's next lock call: that call drops it (an Unlock with its context
// still reports the loss), and the name's read holds do not pile up.
func TestHandleExpiredLeaseDoesNotBlockTheName(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	const name = "handle32:expired"
	hctx, err := c.Mutex(name).TryLockContext(ctx, 0, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, hctx, 5*time.Second, "the 50ms lease")
	waitGone(t, c, name, 5*time.Second)
	if ok, err := c.Mutex(name).TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("TryLock after the unreleased lease expired: %v, %v", ok, err)
	}
	if err := c.Mutex(name).Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the new hold: %v", err)
	}
	if err := c.Mutex(name).Unlock(hctx); !errors.Is(err, ErrLeaseEnded) {
		t.Fatalf("Unlock with the expired hold's context: %v, want ErrLeaseEnded", err)
	}

	rw := c.RWMutex(name + ":rw")
	for range 3 {
		if ok, err := rw.TryRLock(ctx, 0, 30*time.Millisecond); !ok || err != nil {
			t.Fatalf("TryRLock: %v, %v", ok, err)
		}
		waitGone(t, c, rw.Name(), 5*time.Second)
	}
	if err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rw.RUnlock(ctx); err != nil {
		t.Fatalf("RUnlock of the one live read hold beside expired ones: %v", err)
	}
}

// A holder whose fixed lease ran out while it worked, and who got no
// context of its hold (Lock, TryLock), unlocks with the context it locked
// with after another goroutine of the Client took the name (its lock call
// dropped the lost hold): the Unlock answers the loss and leaves the new
// holder's hold alone. It released the new hold and answered nil, and
// another Client then took the lock beside its holder.
func TestUnlockOfDroppedLostHoldReleasesNothingElse(t *testing.T) {
	ctx := ctxT(t)
	c, other := newClient(t, shared), newClient(t, shared)
	for _, kind := range []string{"mutex", "rw"} {
		name := "handle:dropped-lost:" + kind
		tryLock := func(lease time.Duration) (bool, error) { return c.Mutex(name).TryLock(ctx, time.Second, lease) }
		unlock := func() error { return c.Mutex(name).Unlock(ctx) }
		otherTry := func() (bool, error) { return other.Mutex(name).TryLock(ctx, 0, 0) }
		if kind == "rw" {
			tryLock = func(lease time.Duration) (bool, error) { return c.RWMutex(name).TryLock(ctx, time.Second, lease) }
			unlock = func() error { return c.RWMutex(name).Unlock(ctx) }
			otherTry = func() (bool, error) { return other.RWMutex(name).TryLock(ctx, 0, 0) }
		}
		if ok, err := tryLock(100 * time.Millisecond); !ok || err != nil {
			t.Fatal(kind, ok, err)
		}
		waitGone(t, c, name, 5*time.Second)
		// Another goroutine of the Client, with the same context.
		if ok, err := tryLock(0); !ok || err != nil {
			t.Fatal(kind, ok, err)
		}
		if err := unlock(); !errors.Is(err, ErrLockLost) {
			t.Errorf("%s: the lost holder's Unlock answered %v, want ErrLockLost", kind, err)
		}
		if ok, _ := otherTry(); ok {
			t.Errorf("%s: another Client took the lock while the second holder held it", kind)
		}
		if err := unlock(); err != nil {
			t.Errorf("%s: the second holder's Unlock: %v", kind, err)
		}
		if ok, err := otherTry(); !ok || err != nil {
			t.Errorf("%s: another Client could not take the lock after both Unlocks: %v, %v", kind, ok, err)
		}
	}
}

// A TryLock that finds another goroutine of the Client at the handle's gate
// fails at once, without building a lease it would throw away ("run this
// job once": many goroutines try, one holds).
func TestTryLockAtBusyGateAllocatesNothing(t *testing.T) {
	c := newClientOn(t, rdbFor(t, shared))
	ctx := ctxT(t)
	m := c.Mutex("handle:busygate")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Unlock(ctx) }()
	tryCtx := context.Background()
	allocs := testing.AllocsPerRun(200, func() {
		if ok, err := m.TryLock(tryCtx, 0, 0); ok || err != nil {
			t.Fatalf("TryLock at a busy gate: %v, %v", ok, err)
		}
	})
	if allocs != 0 {
		t.Errorf("a TryLock at a busy gate allocates %v times, want none (the lease it would discard was 2)", allocs)
	}
}
