package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A holder that is alive but stuck keeps its lock no longer than MaxHold:
// the watchdog stops renewing, the holder is told with ErrMaxHold while
// Redis still holds the lock, and the lock then expires for the others,
// though the stuck fn never returns.
func TestMaxHoldEndsAStuckHold(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	stuck := newClient(t, r, WithWatchdogTimeout(600*time.Millisecond))
	other := newClient(t, r)
	told := make(chan error, 1)
	unstick := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- stuck.WithLock(ctx, "maxhold", func(fctx context.Context) error {
			<-fctx.Done()
			// Redis must still hold it when the holder is told.
			if n := rdb.Exists(context.Background(), "maxhold").Val(); n != 1 {
				told <- errors.New("told after the lock had left Redis")
			} else {
				told <- context.Cause(fctx)
			}
			<-unstick // stuck: it ignores the loss
			return nil
		}, MaxHold(300*time.Millisecond))
	}()
	select {
	case err := <-told:
		if !errors.Is(err, ErrMaxHold) || !errors.Is(err, ErrLockLost) {
			t.Fatalf("fn's context ended with %v, want a loss wrapping ErrMaxHold", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a hold past its MaxHold was never told")
	}
	// The watchdog no longer renews it: the lock expires in Redis while fn
	// is still inside, and another client gets it.
	next := other.Mutex("maxhold")
	if ok, err := next.TryLock(ctx, 5*time.Second, 0); err != nil || !ok {
		t.Fatalf("the stuck hold's lock never expired: %v, %v", ok, err)
	}
	close(unstick)
	if err := <-done; !errors.Is(err, ErrMaxHold) {
		t.Fatalf("WithLock = %v, want the ErrMaxHold loss", err)
	}
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// WithMaxHold bounds every lock hold of the Client, but not an election's
// leadership; MaxHold and WithMaxHold refuse bad durations before any call.
func TestWithMaxHoldDefault(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	c := newClient(t, r, WithMaxHold(200*time.Millisecond), WithWatchdogTimeout(600*time.Millisecond))
	m := c.Mutex("maxhold:default")
	mustLock(t, m)
	e := c.Election("maxhold:election")
	lead, err := e.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
		if !errors.Is(m.Err(), ErrMaxHold) {
			t.Fatalf("Err = %v, want ErrMaxHold", m.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WithMaxHold did not end a Mutex hold")
	}
	time.Sleep(300 * time.Millisecond) // past the bound for the leader too
	if lead.Err() != nil {
		t.Fatalf("the leadership ended: %v", context.Cause(lead))
	}
	_ = m.Unlock(ctx) // the loss, or ErrNotHeld once the lock expired
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := New(rdbFor(t, r), WithMaxHold(-time.Second)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("WithMaxHold(-1s) = %v", err)
	}
	calls := commands(t, r)["evalsha"]
	err = c.WithLock(ctx, "maxhold:bad", func(context.Context) error { return nil }, MaxHold(0))
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("MaxHold(0) = %v", err)
	}
	if commands(t, r)["evalsha"] != calls {
		t.Fatal("a bad MaxHold reached Redis")
	}
}

// A nested WithLock re-enters the outer hold, and its own MaxHold bounds
// that hold while the inner call holds it: before, the re-entry ignored it
// and a stuck inner fn was renewed for ever. Once the inner call has
// returned, the outer holder keeps its own (here: no) bound.
func TestNestedWithLockMaxHold(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	c := newClient(t, r)
	const name = "maxhold:nested"
	err := c.WithLock(ctx, name, func(outer context.Context) error {
		// An inner call that returns at once leaves no bound behind.
		if err := c.WithLock(outer, name, func(context.Context) error { return nil }, MaxHold(100*time.Millisecond)); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond)
		if err := outer.Err(); err != nil {
			t.Errorf("the outer hold ended by the returned inner call's MaxHold: %v", context.Cause(outer))
		}
		// A stuck inner call is told at its bound.
		var inner error
		err := c.WithLock(outer, name, func(fctx context.Context) error {
			wait, cancel := context.WithTimeout(fctx, 10*time.Second)
			defer cancel()
			<-wait.Done()
			inner = context.Cause(fctx)
			return nil
		}, MaxHold(200*time.Millisecond))
		if !errors.Is(inner, ErrMaxHold) {
			t.Errorf("the inner fn's context ended with %v, want a loss wrapping ErrMaxHold", inner)
		}
		if !errors.Is(err, ErrMaxHold) {
			t.Errorf("inner WithLock = %v, want the ErrMaxHold loss", err)
		}
		return nil
	})
	if !errors.Is(err, ErrMaxHold) {
		t.Fatalf("outer WithLock = %v, want the loss of its one hold", err)
	}
}
