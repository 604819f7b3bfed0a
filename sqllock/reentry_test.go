package sqllock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// A nested WithLock that fn started on a goroutine re-enters the hold and
// may still be inside when the outer WithLock returns. As in the Redis tier
// (whose re-entries count), the lock stays held until the last call inside
// it returns: the outer call leaves without releasing, the nested one's
// context ends with the outer one's (it descends from it), and the nested
// call's return releases the lock and gives its session back.
func TestNestedHoldOutlivesItsOuterWithLock(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		admin := b.open(t)
		db := b.open(t)
		l := b.newLocker(t, db)
		other := b.newLocker(t, b.open(t)) // another process
		ctx := ctxT(t, 30*time.Second)
		name := "nested-goroutine:" + b.name

		entered, leave := make(chan context.Context, 1), make(chan struct{})
		nested := make(chan error, 1)
		var token uint64
		var nctx context.Context
		defer close(leave)
		err := l.WithLock(ctx, name, func(fctx context.Context) error {
			token = dlock.TokenFrom(fctx)
			go func() {
				nested <- l.WithLock(fctx, name, func(nctx context.Context) error {
					entered <- nctx
					<-leave
					return nil
				})
			}()
			// The outer call returns once the nested one is inside.
			select {
			case nctx = <-entered:
				return nil
			case err := <-nested:
				return err
			}
		})
		if err != nil || nctx == nil {
			t.Fatalf("outer WithLock = %v (nested call entered: %t)", err, nctx != nil)
		}
		if dlock.TokenFrom(nctx) != token {
			t.Fatalf("the nested call runs with token %d, the hold's is %d", dlock.TokenFrom(nctx), token)
		}
		// The nested call is told that its outer call is over.
		select {
		case <-nctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the nested call's context outlived the outer call's")
		}
		// Yet nobody else may hold the name while it is inside.
		if _, err := other.Acquire(ctx, name, dlock.FallbackRequest{Name: name}, 0); !errors.Is(err, dlock.ErrWaitTimeout) {
			t.Fatalf("another Locker's Acquire while a nested call is inside the hold = %v, want ErrWaitTimeout", err)
		}
		if b.holder(t, admin, name) == 0 {
			t.Fatal("the lock is free on the server while a nested call is inside the hold")
		}
		if n := db.Stats().InUse; n != 1 {
			t.Fatalf("%d sessions in use while the nested call is inside, want 1 (the hold's)", n)
		}

		leave <- struct{}{}
		if err := <-nested; err != nil {
			t.Fatalf("nested WithLock = %v", err)
		}
		// The last call out released the lock.
		h, err := other.Acquire(ctx, name, dlock.FallbackRequest{Name: name}, 0)
		if err != nil {
			t.Fatalf("Acquire after the nested call returned = %v", err)
		}
		if h.Token() <= token {
			t.Fatalf("token %d after the hold, want above %d", h.Token(), token)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// Re-entering with the kept context now finds the hold released.
		if err := l.WithLock(nctx, name, func(context.Context) error { return nil }); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("re-entry after every call left = %v, want ErrNotHeld", err)
		}
	})
}
