package dlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The review's pattern, eight stars before a 'b' that never comes, against
// a 300-byte lock name: Locks answers (no match, then a match with the 'b'
// dropped), and once the Client is closed nothing of the scan runs on. A
// backtracking matcher ran until the ctx's end and then on in the
// background, past Close. The ctx's 20 s is a liveness bound, not a speed
// assertion: the answer takes milliseconds. A pattern over the limit is
// refused before any call.
func TestLocksBacktrackingPattern(t *testing.T) {
	r := testenvRedis(t)
	rdb := rdbFor(t, r)
	before := goleak.IgnoreCurrent()
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := strings.Repeat("a", 300)
	m := c.Mutex(name)
	if ok, err := m.TryLock(ctx, 0, time.Minute); !ok || err != nil {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	infos, err := c.Locks(ctx, "*a*a*a*a*a*a*a*a*b")
	if err != nil || len(infos) != 0 {
		t.Fatalf("Locks(no match): %d found, %v", len(infos), err)
	}
	infos, err = c.Locks(ctx, "*a*a*a*a*a*a*a*a*")
	if err != nil || len(infos) != 1 || infos[0].Name != name || !infos[0].Locked {
		t.Fatalf("Locks(match): %+v, %v", infos, err)
	}
	if _, err := c.Locks(ctx, strings.Repeat("*", 4097)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Locks(4097-byte pattern): %v, want ErrInvalidArgument", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("still running after Close: %v", err)
	}
}
