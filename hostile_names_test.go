package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Names that are one of dlock's own keys (a lock's fencing counter, queue,
// ...) or that hold a control character are refused by every kind, before
// any network call. Before, Mutex("dlock:fence:{acct}") made the fencing
// counter of lock "acct" a hash, and every grant of "acct" failed with
// WRONGTYPE; and a name could carry escape sequences to the terminal of an
// operator who listed it.
func TestReservedAndControlNamesRefused(t *testing.T) {
	c, err := New(unreachable(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, name := range []string{"dlock:fence:{acct}", "dlock:queue:{acct}", "dlock:forced:{acct}", "dlock:semaphore:{s}",
		"a\x1b]0;pwned\x07", "\x1b[2J", "a\nb", "a\u009b2J"} {
		m := c.Mutex(name)
		_, e1 := m.TryLock(ctx, time.Second, 0)
		_, e2 := m.ForceUnlock(ctx)
		e3 := c.WithLock(ctx, name, func(context.Context) error { return nil })
		e4 := c.RWMutex(name).RLock(ctx)
		e5 := c.FairMutex(name).Lock(ctx)
		_, e6 := c.Semaphore(name, 1).Acquire(ctx, 0, 0)
		e7 := c.CountDownLatch(name).Wait(ctx)
		_, e8 := c.Election(name).Leader(ctx)
		_, e9 := c.Inspect(ctx, name)
		for i, err := range []error{e1, e2, e3, e4, e5, e6, e7, e8, e9} {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("name %q, call %d: %v, want ErrInvalidArgument", name, i+1, err)
			}
		}
	}
}
