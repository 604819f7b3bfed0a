package dlock

import (
	"context"
	"errors"
	"testing"

	"github.com/dlock-dev/dlock/internal/keys"
)

// FuzzMutexOps runs random sequences of TryLock, Unlock and HoldCount by the
// handles of two Clients on one name (two owners: one Client's handles of a
// name are one lock) against the real (shared) server, so the Lua scripts
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
		c, ctx := newClient(t, shared), ctxT(t)
		hs := [2]*Mutex{c.Mutex(name), newClient(t, shared).Mutex(name)}
		var counts [2]int
		var held [2]context.Context // each handle's hold, which its re-entries carry
		for _, op := range ops {
			i := int(op>>1) % 2
			m := hs[i]
			switch op % 3 {
			case 0:
				lctx := ctx
				if counts[i] > 0 {
					lctx = held[i]
				}
				hctx, err := m.TryLockContext(lctx, 0, 0)
				ok := err == nil
				if errors.Is(err, ErrWaitTimeout) {
					err = nil
				}
				if err != nil {
					t.Fatal(err)
				}
				if ok && counts[i] == 0 {
					held[i] = hctx
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

// FuzzRWOps does the same for RWMutex: two handles take and release read and
// write holds in random order. Invariants: a write hold excludes the other
// handle's holds of either kind; reads share; a handle that holds only reads
// gets ErrUpgrade for a write; the writer may also read; releases of nothing
// are ErrNotHeld; once everything is released the lock is free.
func FuzzRWOps(f *testing.F) {
	f.Add([]byte{0, 4, 1, 5, 2, 3, 6, 7, 0, 2}, "catalog")
	f.Add([]byte{2, 0, 3, 4, 1, 6, 5, 7}, "x{y}")
	f.Fuzz(func(t *testing.T, ops []byte, name string) {
		name = "fuzzrw:" + name
		if keys.Validate(name) != nil || len(ops) > 40 {
			return
		}
		c, ctx := newClient(t, shared), ctxT(t)
		hs := [2]*RWMutex{c.RWMutex(name), c.RWMutex(name)}
		var reads, writes [2]int
		// Each handle is one call chain: its read and write holds' contexts.
		var rctx, wctx [2]context.Context
		chain := func(i int, readFirst bool) context.Context {
			switch {
			case readFirst && reads[i] > 0:
				return rctx[i]
			case writes[i] > 0:
				return wctx[i]
			case reads[i] > 0:
				return rctx[i]
			}
			return ctx
		}
		try := func(hctx context.Context, err error) (context.Context, bool, error) {
			if errors.Is(err, ErrWaitTimeout) {
				return nil, false, nil
			}
			return hctx, err == nil, err
		}
		for _, op := range ops {
			i := int(op>>2) % 2
			o := 1 - i
			h := hs[i]
			switch op % 4 {
			case 0: // read: re-enters, or downgrades under the write hold
				hctx, ok, err := try(h.ReadContext(chain(i, true), 0, 0))
				if err != nil {
					t.Fatal(err)
				}
				if want := writes[o] == 0; ok != want {
					t.Fatalf("TryRLock by %d = %v, want %v (reads %v writes %v)", i, ok, want, reads, writes)
				}
				if ok {
					if reads[i] == 0 {
						rctx[i] = hctx
					}
					reads[i]++
				}
			case 1: // write
				hctx, ok, err := try(h.WriteContext(chain(i, false), 0, 0))
				if reads[i] > 0 && writes[i] == 0 {
					if !errors.Is(err, ErrUpgrade) {
						t.Fatalf("upgrade by %d = %v, %v; want ErrUpgrade", i, ok, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if want := writes[i] > 0 || (reads[o] == 0 && writes[o] == 0); ok != want {
					t.Fatalf("TryLock by %d = %v, want %v (reads %v writes %v)", i, ok, want, reads, writes)
				}
				if ok {
					if writes[i] == 0 {
						wctx[i] = hctx
					}
					writes[i]++
				}
			case 2:
				err := h.RUnlock(chain(i, true))
				if reads[i] == 0 {
					if !errors.Is(err, ErrNotHeld) {
						t.Fatalf("RUnlock of nothing = %v", err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				reads[i]--
			case 3:
				err := h.Unlock(chain(i, false))
				if writes[i] == 0 {
					if !errors.Is(err, ErrNotHeld) {
						t.Fatalf("Unlock of nothing = %v", err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				writes[i]--
			}
		}
		for i, h := range hs {
			for ; writes[i] > 0; writes[i]-- {
				if err := h.Unlock(wctx[i]); err != nil {
					t.Fatal(err)
				}
			}
			for ; reads[i] > 0; reads[i]-- {
				if err := h.RUnlock(rctx[i]); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n, err := c.e.Redis().Exists(ctx, name).Result(); n != 0 || err != nil {
			t.Fatalf("lock still there after every hold was released: %v, %v", n, err)
		}
	})
}
