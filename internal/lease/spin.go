package lease

import (
	"context"
	"math/rand/v2"
	"time"
)

// spin is run in spin mode: attempts separated by a jittered exponential
// backoff, with no subscription. A Mutex spins without queueing; a FairMutex
// queues an entry with ticket 0 (nobody listens for its hand-off message)
// and finds a hand-off by polling, so arrival order still holds.
func (a *acquisition) spin(ctx, waitCtx context.Context) (bool, error) {
	e := a.h.e
	if a.canWait {
		// Ticket 0: nobody listens for a hand-off message; the kinds that
		// keep an order queue all the same and find a hand-off by polling.
		a.q.Entry = a.h.p.Entry(0, a.ttl, a.h)
	}
	backoff := e.Cfg.SpinMin
	var timer *time.Timer
	for {
		r, sent, left, err := a.try(waitCtx)
		if err != nil {
			return a.failed(ctx, err, left)
		}
		if r.Granted {
			return a.grant(ctx, r.Token, sent)
		}
		if !a.canWait {
			return false, nil
		}
		d := backoff/2 + rand.N(backoff/2+1)
		if r.Wait >= 0 {
			d = min(d, r.Wait)
		}
		if a.q.Entry != "" {
			// Queued: a hand-off to this waiter tells nobody (ticket 0)
			// and lapses after the claim window, and the next waiter
			// then has its turn. Look for one four times per window
			// whatever the backoff has grown to, as a stalled popper does.
			d = min(d, e.Cfg.Claim/4)
		}
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-waitCtx.Done():
			return a.over(ctx)
		}
		if e.closed.Load() {
			a.giveUp()
			return false, ErrClosed
		}
		// Doubling without overflow: spinMax is at most MaxSpinBackoff.
		backoff = min(backoff*2, e.Cfg.SpinMax)
	}
}
