package dlock

import (
	"errors"
	"testing"
	"time"
)

// Names whose companion keys once coincided ("X" and "{X}" shared
// dlock:queue:{X}) are separate locks: releasing one never hands the other
// to a waiter while the other's owner still holds it.
func TestTaggedAndPlainNamesDoNotShareAQueue(t *testing.T) {
	for _, pair := range [][2]string{{"X", "{X}"}, {"a{b", "{a{b}"}, {"{X}", "{X}:{X}"}} {
		plain, tagged := pair[0], pair[1]
		t.Run(plain+"|"+tagged, func(t *testing.T) {
			a, b := newClient(t, shared), newClient(t, shared)
			ctx := ctxT(t)
			holder := a.Mutex(tagged)
			mustLock(t, holder)
			// A waiter for the tagged name queues itself.
			granted := make(chan error, 1)
			waiter := b.Mutex(tagged)
			go func() {
				ok, err := waiter.TryLock(ctx, 20*time.Second, 0)
				if err == nil && !ok {
					err = errors.New("wait ran out")
				}
				granted <- err
			}()
			waitFor(t, "the waiter to queue", func() bool {
				info, err := a.Inspect(ctx, tagged)
				return err == nil && len(info.Waiters) == 1
			})
			// Taking and releasing the other name must leave that queue alone.
			other := a.Mutex(plain)
			mustLock(t, other)
			mustUnlock(t, other)
			select {
			case err := <-granted:
				t.Fatalf("releasing %q granted %q to a waiter while its holder still held it (err %v)", plain, tagged, err)
			case <-time.After(200 * time.Millisecond):
			}
			if n, err := holder.HoldCount(ctx); n != 1 || err != nil {
				t.Fatalf("holder of %q: HoldCount = %d, %v", tagged, n, err)
			}
			mustUnlock(t, holder)
			awaitNil(t, granted, 10*time.Second, "the waiter never got the lock after its holder released")
			mustUnlock(t, waiter)
		})
	}
}
