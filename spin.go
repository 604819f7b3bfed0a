package dlock

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// spin is run in spin mode: attempts separated by a jittered exponential
// backoff, with no subscription. A Mutex spins without queueing; a FairMutex
// queues an entry with ticket 0 (nobody listens for its hand-off message)
// and finds a hand-off by polling, so arrival order still holds.
func (a *acquisition) spin(ctx, waitCtx context.Context) (bool, error) {
	c := a.h.c
	if a.canWait {
		switch p := a.h.p.(type) {
		case mutexProtocol:
			if p.fair {
				a.q.entry = keys.QueueEntry(0, ms(a.ttl), a.h.ownerField)
			}
		case writeProtocol:
			a.q.entry = "w"
		}
	}
	backoff := c.cfg.spinMin
	var timer *time.Timer
	for {
		r, sent, left, err := a.try(waitCtx)
		if err != nil {
			return a.failed(ctx, err, left)
		}
		if r.v[0] == 1 {
			return a.grant(ctx, uint64(r.v[2]), sent)
		}
		if !a.canWait {
			return false, nil
		}
		d := backoff/2 + rand.N(backoff/2+1)
		if pttl := time.Duration(r.v[1]) * time.Millisecond; pttl >= 0 {
			d = min(d, pttl)
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
			a.giveUp()
			if ctx.Err() != nil {
				return false, context.Cause(ctx)
			}
			a.timedOut = true
			return false, nil
		}
		if c.closed.Load() {
			a.giveUp()
			return false, ErrClosed
		}
		// Doubling without overflow: spinMax is at most MaxSpinBackoff.
		backoff = min(backoff*2, c.cfg.spinMax)
	}
}
