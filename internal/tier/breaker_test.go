package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// hangingRedis returns tiers over a Redis that, once hang is set, answers
// no call: each waits for its ctx, as a Redis that accepts and never
// replies does. Until then it refuses every call.
func hangingRedis(b Breaker) (*Tiers, *bool, *sync.Mutex) {
	var mu sync.Mutex
	hang := false
	w := &world{sql: make(chan struct{}, 1)}
	t := New(Config{
		Fallback: fakeFallback{w}, Breaker: b, Quarantine: time.Hour, ClientID: "c", Watchdog: time.Second,
		Redis: func(ctx context.Context, req Request, fn func(context.Context) error) error {
			mu.Lock()
			h := hang
			mu.Unlock()
			if !h {
				return fmt.Errorf("%w: connection refused", lease.ErrUnavailable)
			}
			<-ctx.Done()
			return ctx.Err()
		},
		Raise:  func(context.Context, string, uint64) error { return nil },
		Detach: func(f func(context.Context)) { go f(context.Background()) },
		Logger: slog.New(slog.DiscardHandler),
	})
	return t, &hang, &mu
}

// A half-open breaker lets one probe through. When the probe's caller
// gives up (its ctx ends) before Redis answered, the probe proves nothing:
// the breaker must not close on it, and the next caller must be let
// through to probe again, one at a time as before.
func TestCancelledProbeKeepsTheBreakerOpen(t *testing.T) {
	var mu sync.Mutex
	var states []string
	b := NewBreaker(1, 20*time.Millisecond, func(s string) {
		mu.Lock()
		states = append(states, s)
		mu.Unlock()
	})
	tiers, hang, hmu := hangingRedis(b)
	req := Request{Name: "X", Wait: time.Second}
	nop := func(context.Context) error { return nil }

	// One infrastructure failure opens it (the quarantine of an hour
	// refuses the fallback).
	if err := tiers.WithLock(context.Background(), req, nop); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("first call = %v, want ErrUnavailable", err)
	}
	if b.state != "open" {
		t.Fatalf("breaker %s after a failure, want open", b.state)
	}

	// After the cooldown, the next call is the probe; Redis hangs and the
	// caller gives up.
	time.Sleep(40 * time.Millisecond)
	hmu.Lock()
	*hang = true
	hmu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := tiers.WithLock(ctx, req, nop); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("probe = %v, want its ctx's DeadlineExceeded", err)
	}

	b.mu.Lock()
	state, probing := b.state, b.probing
	b.mu.Unlock()
	if state == "closed" {
		mu.Lock()
		t.Fatalf("a probe whose caller gave up before Redis answered closed the breaker (states %v)", states)
	}
	if probing {
		t.Fatal("the abandoned probe still counts as in flight: no caller could probe again")
	}
	// The next caller probes; a second one, while it does, is refused.
	done, err := b.Allow()
	if err != nil {
		t.Fatalf("the next caller may not probe: %v", err)
	}
	if _, err := b.Allow(); err == nil {
		t.Fatal("two probes at once: the breaker closed")
	}
	done(nil)
	if b.state != "closed" {
		t.Fatalf("breaker %s after a probe that worked, want closed", b.state)
	}
}

// In the closed state a caller giving up proves nothing either: it neither
// resets nor adds to the failures in a row.
func TestCancelledCallLeavesClosedBreakerCounts(t *testing.T) {
	b := NewBreaker(2, time.Hour, nil)
	done, _ := b.Allow()
	done(fmt.Errorf("%w: reset", lease.ErrUnavailable))
	tiers, hang, hmu := hangingRedis(b)
	hmu.Lock()
	*hang = true
	hmu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_ = tiers.WithLock(ctx, Request{Name: "X", Wait: time.Second}, func(context.Context) error { return nil })
	if b.fails != 1 || b.state != "closed" {
		t.Fatalf("after a failure and a cancelled call: %d failures, %s; want 1, closed", b.fails, b.state)
	}
}

// recordingBreaker is a Breaker of the caller's own (gobreaker, say): it
// refuses while refuse is set and records what each call's done got.
type recordingBreaker struct {
	mu     sync.Mutex
	refuse bool
	got    []error
}

func (r *recordingBreaker) Allow() (func(error), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse {
		return nil, errors.New("open")
	}
	return func(err error) {
		r.mu.Lock()
		r.got = append(r.got, err)
		r.mu.Unlock()
	}, nil
}

// A Breaker of the caller's own cannot be asked whether a call is its
// half-open probe. A call that follows a refusal may be; when its caller
// gives up, done gets the ctx's error (so that the breaker does not close
// on it; gobreaker's IsExcluded can recognise it). Any other cancelled call
// counts as working, as before, so that callers giving up never open it.
func TestCancelledCallAfterRefusalIsNoSuccess(t *testing.T) {
	rb := &recordingBreaker{}
	tiers, hang, hmu := hangingRedis(rb)
	hmu.Lock()
	*hang = true
	hmu.Unlock()
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_ = tiers.WithLock(ctx, Request{Name: "X", Wait: time.Second}, func(context.Context) error { return nil })
	}
	call() // closed: no refusal seen
	rb.mu.Lock()
	rb.refuse = true
	rb.mu.Unlock()
	call() // refused: never reaches done
	rb.mu.Lock()
	rb.refuse = false
	rb.mu.Unlock()
	call() // the probe, abandoned
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if len(rb.got) != 2 {
		t.Fatalf("done called %d times, want 2", len(rb.got))
	}
	if rb.got[0] != nil {
		t.Fatalf("a cancelled call with the breaker closed reported %v, want nil", rb.got[0])
	}
	if !errors.Is(rb.got[1], context.DeadlineExceeded) {
		t.Fatalf("a cancelled call after a refusal reported %v, want the ctx's error", rb.got[1])
	}
}
