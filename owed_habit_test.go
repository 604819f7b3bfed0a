package dlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The read side's TestUnlockOfDroppedLostHoldReleasesNothingElse. Reader
// A's fixed lease ends while it reads; reader B, another goroutine of the
// Client with a context of its own, read-locks the name, which drops A's
// lost hold. A's late RUnlock with its ctx answers its loss. Before, a
// shared handle kept no owed Unlocks: A's RUnlock found one read hold, B's,
// released it and answered nil, and another Client took the write lock
// beside B's read.
func TestLostReadersRUnlockAnswersItsLoss(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	other := newClient(t, r)
	tctx := ctxT(t)
	const name = "habit:read-owed"
	rw := c.RWMutex(name)
	a := context.WithValue(tctx, workerKey{}, "A")
	b := context.WithValue(tctx, workerKey{}, "B")

	if ok, err := rw.TryRLock(a, 0, 100*time.Millisecond); !ok || err != nil {
		t.Fatalf("A's TryRLock: %v %v", ok, err)
	}
	waitFor(t, "A's lease end", func() bool { return rw.r.Err() != nil })
	if err := rw.RLock(b); err != nil {
		t.Fatal(err)
	}
	err := rw.RUnlock(a) // A, done reading, late
	if !errors.Is(err, ErrLockLost) {
		t.Errorf("lost reader A's RUnlock answered %v, want its loss", err)
	}
	if ok, _ := other.RWMutex(name).TryLock(tctx, 0, 0); ok {
		t.Errorf("another Client took the write lock while reader B holds its read share (A's RUnlock: %v)", err)
		_ = other.RWMutex(name).Unlock(tctx)
	}
	if err := rw.RUnlock(b); err != nil {
		t.Errorf("B's RUnlock of its own read hold: %v", err)
	}
}

// mapCtx is a context type that is not comparable (a struct holding a
// map), as some frameworks' request contexts are.
type mapCtx struct {
	context.Context
	m map[string]int
}

// Contexts are compared to tell holders apart. context.WithoutCancel
// returns a comparable struct value whose field holds the parent: two of an
// uncomparable parent type made == panic inside RUnlock before.
func TestUnlockWithoutCancelOfAnUncomparableContext(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	const name = "habit:uncomparable"
	rw := c.RWMutex(name)
	req := mapCtx{ctxT(t), map[string]int{}}
	bg := context.WithoutCancel(req) // e.g. work that outlives the request
	if err := rw.RLock(bg); err != nil {
		t.Fatal(err)
	}
	if err := rw.RLock(bg); err != nil { // a second reader of the same request
		t.Fatal(err)
	}
	for range 2 {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("RUnlock panicked: %v", p)
					_ = rw.RUnlock(ctxT(t)) // best effort
				}
			}()
			if err := rw.RUnlock(bg); err != nil {
				t.Errorf("RUnlock: %v", err)
			}
		}()
	}
}

// A holder that lets a fixed lease expire (Redisson's habit) and then locks
// and unlocks the name with the same context: its first Unlock answers the
// old hold's loss (one context cannot tell two holders apart, and the old
// loss must not release a hold another goroutine with that context counts
// on), says that the new hold is still held, and the next Unlock releases
// it. Nothing is left renewed in Redis.
func TestHoldLeftToExpireThenLockUnlockWithTheSameContext(t *testing.T) {
	r := testenvRedis(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r)
	ctx := context.Background()
	tctx := ctxT(t)
	const name = "habit:same-context"
	m := c.Mutex(name)
	if ok, err := m.TryLock(ctx, 0, 100*time.Millisecond); !ok || err != nil {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	waitFor(t, "the lease's end", func() bool { return m.Err() != nil })
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	err := m.Unlock(ctx)
	if !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "the next Unlock with it releases that") {
		t.Fatalf("the first Unlock: %v, want the old loss and word of the hold still held", err)
	}
	if n := rdb.Exists(tctx, name).Val(); n != 1 {
		t.Fatal("the first Unlock released the hold taken after the lost one")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("the second Unlock: %v", err)
	}
	if n := rdb.Exists(tctx, name).Val(); n != 0 {
		t.Fatalf("the lock is still in Redis after both Unlocks: %v", rdb.HGetAll(tctx, name).Val())
	}
}
