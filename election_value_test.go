package dlock

import (
	"errors"
	"testing"
	"time"
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
