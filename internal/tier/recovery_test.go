package tier

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// The recovery: once Redis answers again, Redis grants also take the
// fallback lock, so that they wait for fallback holders still inside fn.

// A fallback holder F of X stays inside fn past the recovery window (here
// a nanosecond long): a Redis grant of X in the same Client must still take
// the fallback lock, and so wait for F, rather than run fn beside it. Once
// F is out, Redis grants of X no longer take the fallback lock.
func TestRecoveryLastsWhileFallbackHolds(t *testing.T) {
	w, tiers := newWorld(closedBreaker{}, 20*time.Millisecond, time.Nanosecond)
	entered, release := make(chan struct{}), make(chan struct{})
	fellBack := make(chan error, 1)
	go func() { fellBack <- lockX(w, tiers, time.Minute, entered, release) }()
	<-entered // F holds X in the fallback tier

	w.redisUp.Store(true) // Redis is back; the window ends as it opens
	err := lockX(w, tiers, 50*time.Millisecond, nil, nil)
	close(release)
	if ferr := <-fellBack; ferr != nil {
		t.Fatalf("F: %v", ferr)
	}
	if w.overlap.Load() {
		t.Fatalf("a Redis grant of X ran fn while F held X in the fallback tier (err %v)", err)
	}
	if !errors.Is(err, lease.ErrWaitTimeout) {
		t.Fatalf("Redis WithLock while F held X = %v, want ErrWaitTimeout (waiting for F)", err)
	}

	// The fallback lock is taken by hand: a Redis grant that still took it
	// would time out.
	w.sql <- struct{}{}
	defer func() { <-w.sql }()
	if err := lockX(w, tiers, 0, nil, nil); err != nil {
		t.Fatalf("Redis WithLock after F left = %v: it still takes the fallback lock", err)
	}
}
