package dlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// The seeds' deadlock trap: one process takes {A, B}, another {B, A}, over
// and over. Taken in the given order, they deadlock; MultiLock sorts them.
func TestMultiLockOppositeOrdersNeverDeadlock(t *testing.T) {
	r := testenvRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := newClient(t, r), newClient(t, r)
	const rounds = 100
	var wg sync.WaitGroup
	for i, order := range [][2]string{{"trap:A", "trap:B"}, {"trap:B", "trap:A"}} {
		c := []*Client{a, b}[i]
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					ml := c.MultiLock(c.Mutex(order[0]), c.Mutex(order[1]))
					if err := ml.Lock(ctx); err != nil {
						t.Errorf("order %v: %v (deadlocked?)", order, err)
						return
					}
					if err := ml.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	ml := a.MultiLock(a.Mutex("z"), a.Mutex("b"), a.RWMutex("m").RLocker())
	if got := ml.Names(); !slices.Equal(got, []string{"b", "m", "z"}) {
		t.Fatalf("Names = %v, want sorted", got)
	}
}

// On partial failure nothing stays held, and the wait is one budget for
// all members.
func TestMultiLockAllOrNothing(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	a, b := newClient(t, r), newClient(t, r)
	held := b.Mutex("aon:c")
	mustLock(t, held)
	ml := a.MultiLock(a.Mutex("aon:b"), a.FairMutex("aon:a"), a.Mutex("aon:c"))
	start := time.Now()
	ok, err := ml.TryLock(ctx, 300*time.Millisecond, 0)
	if ok || err != nil {
		t.Fatalf("TryLock with a member held elsewhere = %v, %v", ok, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > time.Second {
		t.Fatalf("gave up after %v, want the 300ms budget", d)
	}
	rdb := rdbFor(t, r)
	if n, _ := rdb.Exists(ctx, "aon:a", "aon:b").Result(); n != 0 {
		t.Fatalf("%d members left held after a failed TryLock", n)
	}
	// Two members held elsewhere: still one budget, not one per member.
	held2 := b.Mutex("aon:a")
	mustLock(t, held2)
	start = time.Now()
	if ok, err := ml.TryLock(ctx, 300*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	if d := time.Since(start); d > 550*time.Millisecond {
		t.Fatalf("two blocked members took %v of a 300ms budget", d)
	}
	// A cancelled Lock also gives everything back.
	mustUnlock(t, held2)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := ml.Lock(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a held member = %v", err)
	}
	// The members it took are given back in the background (its ctx is done).
	waitFor(t, "the members to be given back after a cancelled Lock", func() bool {
		n, _ := rdb.Exists(ctx, "aon:a", "aon:b").Result()
		return n == 0
	})
	mustUnlock(t, held)
	if ok, err := ml.TryLock(ctx, time.Second, 0); !ok || err != nil {
		t.Fatalf("TryLock on free members = %v, %v", ok, err)
	}
	if err := ml.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, "aon:a", "aon:b", "aon:c").Result(); n != 0 {
		t.Fatalf("%d members held after Unlock", n)
	}
}

// A Mutex and a read lock in one MultiLock: the read member shares with
// other readers and excludes a writer.
func TestMultiLockMixedKinds(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	a, b := newClient(t, r), newClient(t, r)
	reader := b.RWMutex("mix:rw")
	if err := reader.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	rw := a.RWMutex("mix:rw")
	ml := a.MultiLock(rw.RLocker(), a.Mutex("mix:m"))
	if ok, err := ml.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("Mutex + read lock beside another reader = %v, %v", ok, err)
	}
	if rw.RToken() == 0 {
		t.Fatal("read member has no token")
	}
	if ok, err := b.RWMutex("mix:rw").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("writer beside the MultiLock's read member = %v, %v", ok, err)
	}
	if ok, err := b.Mutex("mix:m").TryLock(ctx, 0, 0); ok || err != nil {
		t.Fatalf("Mutex member taken twice = %v, %v", ok, err)
	}
	if err := ml.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := reader.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := b.RWMutex("mix:rw")
	if ok, err := w.TryLock(ctx, 0, 0); !ok || err != nil {
		t.Fatalf("writer after all readers left = %v, %v", ok, err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMultiLockBadInput(t *testing.T) {
	c, err := New(unreachable(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var nilMutex *Mutex
	for i, ml := range []*MultiLock{
		c.MultiLock(),
		c.MultiLock(nil),
		c.MultiLock(nilMutex),
		c.MultiLock(c.Mutex("a"), c.Mutex("a")),
		c.MultiLock(c.Mutex("a"), c.RWMutex("a").RLocker()),
		c.MultiLock(c.Mutex("")),
		c.MultiLock(c.Mutex("a"), (*FairMutex)(nil)),
	} {
		_, e1 := ml.TryLock(ctx, time.Second, 0)
		e2 := ml.Lock(ctx)
		e3 := ml.Unlock(ctx)
		for j, err := range []error{e1, e2, e3} {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("MultiLock %d, call %d: %v, want ErrInvalidArgument", i, j, err)
			}
		}
	}
	ml := c.MultiLock(c.Mutex("a"))
	if _, err := ml.TryLock(ctx, 0, time.Microsecond); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("sub-millisecond lease: %v", err)
	}
}

func TestContentionMulti(t *testing.T) {
	contend(t, func(c *Client, g, i int) familyHold {
		names := []string{"hot:m1", "hot:m2", "hot:m3"}
		if (g+i)%2 == 1 {
			slices.Reverse(names)
		}
		var ls []Member
		for _, n := range names {
			if n == "hot:m2" {
				ls = append(ls, c.FairMutex(n))
			} else {
				ls = append(ls, c.Mutex(n))
			}
		}
		return familyHold{l: c.MultiLock(ls...)}
	})
}

// LockContext's context carries every member's hold and ends, with that
// hold's cause, when any one of them is lost; Unlock with it answers the
// loss and releases the others. TryLockContext is all or nothing, with
// ErrWaitTimeout when a member stays taken.
func TestMultiLockContextEndsWithAnyMember(t *testing.T) {
	ctx := ctxT(t)
	c, other := newClient(t, shared), newClient(t, shared)
	rdb := rdbFor(t, shared)
	ml := c.MultiLock(c.Mutex("multi:ctx:b"), c.RWMutex("multi:ctx:a").RLocker(), c.Mutex("multi:ctx:c"))
	hctx, err := ml.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ml.Names() {
		if TokenFrom(hctx) == 0 || rdb.Exists(ctx, name).Val() != 1 {
			t.Fatalf("%s not held under the MultiLock's context", name)
		}
	}
	if held, err := other.Mutex("multi:ctx:b").ForceUnlock(ctx); !held || err != nil {
		t.Fatalf("ForceUnlock: %v, %v", held, err)
	}
	<-hctx.Done()
	if cause := context.Cause(hctx); !errors.Is(cause, ErrLockLost) {
		t.Errorf("the context's cause: %v, want the member's loss", cause)
	}
	if err := ml.Unlock(hctx); !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock after a member's loss: %v, want ErrLockLost", err)
	}
	// The context is done, so their releases went on in the background.
	for _, name := range []string{"multi:ctx:a", "multi:ctx:c"} {
		waitFor(t, name+" released", func() bool { return rdb.Exists(ctx, name).Val() == 0 })
	}

	// All or nothing: c is taken elsewhere, so a and b are given back.
	if err := other.Mutex("multi:ctx:c").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ml.TryLockContext(ctx, 50*time.Millisecond, 0); !errors.Is(err, ErrWaitTimeout) {
		t.Errorf("TryLockContext with a member taken elsewhere: %v, want ErrWaitTimeout", err)
	}
	for _, name := range []string{"multi:ctx:a", "multi:ctx:b"} {
		waitFor(t, name+" given back", func() bool { return rdb.Exists(ctx, name).Val() == 0 })
	}
	if err := other.Mutex("multi:ctx:c").Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
