package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// FuzzMutexOps runs random sequences of TryLock, Unlock and HoldCount by two
// handles on one name against the real (shared) server, so the Lua scripts
// run on fuzzed names and orders. Invariants: never two owners at once; the
// hold count Redis reports is the one the handle tracks; Unlock of nothing
// is ErrNotHeld; once both handles let go the lock is free.
func FuzzMutexOps(f *testing.F) {
	f.Add([]byte{0, 0, 2, 1, 1, 2, 3, 4, 5}, "coupon")
	f.Add([]byte{2, 0, 3, 0, 4, 5}, "a{b}c")
	f.Add([]byte{1, 3, 0, 0, 0, 1, 1, 1}, "ünï code")
	f.Fuzz(func(t *testing.T, ops []byte, name string) {
		name = "fuzz:" + name
		if keys.Validate(name) != nil || len(ops) > 40 {
			return
		}
		c, err := New(shared.NewClient(t))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		hs := [2]*Mutex{c.Mutex(name), c.Mutex(name)}
		var counts [2]int
		for _, op := range ops {
			i := int(op>>1) % 2
			m := hs[i]
			switch op % 3 {
			case 0:
				ok, err := m.TryLock(ctx, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				other := counts[1-i]
				switch {
				case ok && other > 0:
					t.Fatalf("handle %d got the lock while handle %d holds it %d times", i, 1-i, other)
				case !ok && other == 0:
					t.Fatalf("handle %d refused a lock nobody holds", i)
				case ok:
					counts[i]++
				}
			case 1:
				err := m.Unlock(ctx)
				switch {
				case counts[i] == 0 && !errors.Is(err, ErrNotHeld):
					t.Fatalf("Unlock of nothing = %v, want ErrNotHeld", err)
				case counts[i] > 0 && err != nil:
					t.Fatalf("Unlock = %v", err)
				case counts[i] > 0:
					counts[i]--
				}
			case 2:
				if n, err := m.HoldCount(ctx); err != nil || n != counts[i] {
					t.Fatalf("HoldCount = %d, %v; the handle holds %d", n, err, counts[i])
				}
			}
		}
		for i, m := range hs {
			for ; counts[i] > 0; counts[i]-- {
				if err := m.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if l, err := hs[0].IsLocked(ctx); l || err != nil {
			t.Fatalf("locked after every hold was released: %v, %v", l, err)
		}
	})
}
