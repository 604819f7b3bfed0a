package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// Observe delivers "" for "no leader", so a leader must not announce ""
// (a value read from an unset environment variable, say): observers would
// be told the election has no leader while one leads. Campaign and Proclaim
// refuse it.
func TestElectionEmptyValueRefused(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	c := newClient(t, r)
	obs := newClient(t, r).Election("el:empty").Observe(ctx)
	e := c.Election("el:empty")
	_, err := e.Campaign(ctx, "")
	if err == nil {
		v, lerr := e.Leader(ctx)
		var seen string
		select {
		case seen = <-obs:
		case <-time.After(2 * time.Second):
		}
		t.Fatalf(`Campaign with "" led: Leader = %q, %v; Observe delivered %q, which means "no leader"`, v, lerr, seen)
	}
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf(`Campaign with "": %v, want ErrInvalidArgument`, err)
	}
	lead, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Proclaim(lead, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf(`Proclaim with "": %v, want ErrInvalidArgument`, err)
	}
	if v, err := e.Leader(ctx); v != "a" || err != nil {
		t.Fatalf("Leader = %q, %v", v, err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Resign with the leadership context of a term that has ended (lost, say)
// reports that term's end and leaves alone the term the handle won since
// for another caller: before, it ended whatever term the handle had.
func TestElectionResignOfAnEndedTerm(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	rdb := rdbFor(t, r)
	c := newClient(t, r, WithWatchdogTimeout(600*time.Millisecond))
	const name = "el:resign-late"
	e := c.Election(name)
	first, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// The term is lost: its lock vanishes, and the next renewal says so.
	if err := rdb.Del(ctx, keys.Companion(keys.ElectionPrefix, name)).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Done():
	case <-ctx.Done():
		t.Fatal("the first term never learned of its loss")
	}
	second, err := e.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Resign(first); !errors.Is(err, ErrLockLost) {
		t.Errorf("Resign with the lost term's context = %v, want its loss", err)
	}
	if err := second.Err(); err != nil {
		t.Fatalf("Resign with the lost term's context ended the next term: %v", context.Cause(second))
	}
	if v, err := e.Leader(ctx); v != "b" || err != nil {
		t.Fatalf("Leader = %q, %v; want the second term's", v, err)
	}
	if err := e.Resign(second); err != nil {
		t.Fatal(err)
	}
}

// Client.Election returns a new handle per call, and Proclaim with the
// leadership context worked through any of them; Resign with it answered
// ErrNotHeld through any handle but the one that campaigned and left the
// term running, so a leader that had dropped that handle could end its term
// only by Close or a loss.
func TestElectionResignThroughAnotherHandle(t *testing.T) {
	ctx := ctxT(t)
	c := newClient(t, shared)
	const name = "el:resign-other-handle"
	lead, err := c.Election(name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Election(name).Proclaim(lead, "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Election(name).Resign(lead); err != nil {
		t.Fatalf("Resign(lead) through another handle: %v", err)
	}
	if !errors.Is(context.Cause(lead), ErrResigned) {
		t.Fatalf("the leadership context ended with %v, want ErrResigned", context.Cause(lead))
	}
	if v, err := c.Election(name).Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader after Resign = %q, %v; want ErrNoLeader", v, err)
	}
	// The term is over for the handle that won it too.
	e := c.Election(name)
	next, err := e.Campaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Election(name).Resign(lead); !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrLockLost) {
		t.Fatalf("a second Resign(lead) = %v, want the ended term's error", err)
	}
	if err := next.Err(); err != nil {
		t.Fatalf("a second Resign(lead) ended the next term: %v", context.Cause(next))
	}
	if err := e.Resign(next); err != nil {
		t.Fatal(err)
	}
}
