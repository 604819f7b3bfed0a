package tier

import (
	"testing"
	"time"
)

// The quarantine: a fallback grant waits until the quarantine has passed
// since this Client last reached Redis, so that its Redis holders have been
// told of their loss.

// Redis stays down: the fallback grants X once the quarantine, counted from
// the failure, has passed.
func TestQuarantineThenFallback(t *testing.T) {
	const q = 50 * time.Millisecond
	w, tiers := newWorld(closedBreaker{}, q, time.Second)
	start := time.Now()
	if err := lockX(w, tiers, time.Minute, nil, nil); err != nil {
		t.Fatalf("WithLock with Redis down = %v, want a fallback grant", err)
	}
	if waited := time.Since(start); waited < q {
		t.Fatalf("the fallback granted after %v, within the quarantine %v", waited, q)
	}
}

// A Redis holder H of X renewed (Redis answered) after the failures that
// opened the breaker; while the breaker is still open, a WithLock of X is
// refused by it. The outage that H's renewal ended must not count toward
// the quarantine: the fallback may not grant X while H holds it, here
// within a wait shorter than the quarantine.
func TestQuarantineAfterRedisAnsweredWithBreakerOpen(t *testing.T) {
	w, tiers := newWorld(openBreaker{}, 500*time.Millisecond, time.Second)
	w.enter()            // H holds X in Redis
	tiers.RedisFailed()  // H's renewal failed: the outage starts
	tiers.ReachedRedis() // H's next renewal succeeded: H holds X on
	mustRefuse(t, w, lockX(w, tiers, 100*time.Millisecond, nil, nil))
}
