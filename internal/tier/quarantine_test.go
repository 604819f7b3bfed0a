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

// A Redis holder H of X renews (Redis answered) while a WithLock of X,
// refused by Redis, waits out its quarantine: H holds X on, so the wait
// must not end in a fallback grant.
func TestQuarantineEndsWhenRedisAnswers(t *testing.T) {
	w, tiers := newWorld(closedBreaker{}, 200*time.Millisecond, time.Second)
	w.enter() // H holds X in Redis
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		time.Sleep(50 * time.Millisecond)
		tiers.ReachedRedis() // H's renewal succeeds, within the quarantine
	}()
	err := lockX(w, tiers, time.Minute, nil, nil)
	<-renewed
	mustRefuse(t, w, err)
}

// As TestQuarantineAfterRedisAnsweredWithBreakerOpen, with a wait longer
// than the quarantine: H's renewals go on reaching Redis while the breaker
// refuses the calls, so the fallback never grants X.
func TestQuarantineWithBreakerOpenWhileHolderRenews(t *testing.T) {
	const q = 200 * time.Millisecond
	w, tiers := newWorld(openBreaker{}, q, time.Second)
	w.enter() // H holds X in Redis
	tiers.RedisFailed()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // H's watchdog: a renewal every third of the quarantine
		defer close(stopped)
		tick := time.NewTicker(q / 3)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				tiers.ReachedRedis()
			case <-stop:
				return
			}
		}
	}()
	err := lockX(w, tiers, time.Minute, nil, nil)
	close(stop)
	<-stopped
	mustRefuse(t, w, err)
}
