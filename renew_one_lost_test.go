package dlock

import (
	"sync"
	"testing"
	"time"
)

// renewTimes records when each watchdog call returned, and its error.
type renewTimes struct {
	NopObserver
	mu  sync.Mutex
	at  []time.Time
	err []error
}

func (o *renewTimes) Renewed(n int, err error) {
	o.mu.Lock()
	o.at = append(o.at, time.Now())
	o.err = append(o.err, err)
	o.mu.Unlock()
}

func (o *renewTimes) since(t time.Time) (ok []time.Time, failed int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, at := range o.at {
		if at.After(t) {
			if o.err[i] == nil {
				ok = append(ok, at)
			} else {
				failed++
			}
		}
	}
	return ok, failed
}

// One renewal's reply is lost (the link drops Redis' replies for one
// period around the renewal, then heals): the call gives up after a period
// and is retried a quarter period later, in time. With a call timeout of
// two periods (47a0baa, reverted) the call outlived the hold's local
// deadline (two periods after its send, less the drift margin), no retry
// went out, and the hold was lost though Redis answered all it received.
func TestOneLostRenewalReplyIsRetriedInTime(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	b := startBlackhole(t, r.Addr())
	obs := &renewTimes{}
	const ttl = 1500 * time.Millisecond
	const period = ttl / 3
	c := clientVia(t, b, WithWatchdogTimeout(ttl), WithObserver(obs), WithSpin(time.Millisecond, 10*time.Millisecond))
	m := c.Mutex("renew:renew-timeout")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// Sync with a periodic renewal.
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	var r1 time.Time
	waitFor(t, "a renewal", func() bool {
		ok, _ := obs.since(start)
		if len(ok) > 0 {
			r1 = ok[0]
			return true
		}
		return false
	})
	time.Sleep(time.Until(r1.Add(period / 2)))
	b.CutReplies()
	time.Sleep(time.Until(r1.Add(period + period/2)))
	b.Heal()
	time.Sleep(time.Until(r1.Add(4 * period)))
	ok, failed := obs.since(r1)
	t.Logf("renewals after r1: ok at %v, failed %d", func() (d []time.Duration) {
		for _, a := range ok {
			d = append(d, a.Sub(r1).Round(time.Millisecond))
		}
		return
	}(), failed)
	if err := m.Err(); err != nil {
		t.Errorf("the hold was lost after one lost renewal reply: %v", err)
	} else {
		_ = m.Unlock(ctx)
	}
}
