package dlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/renew"
)

// ForceUnlock's news travels to the evicted holders at once: force.lua
// publishes "forced <lock key>" on each evicted owner's client channel
// (keys.ForcedMessage), and every hold of this Client on that key asks Redis
// whether it still holds. Only Redis's answer ends a hold: the message may
// be forged, and then it costs each hold of the key one renewal.

// forced is the hub's callback for a "forced" message about lockKey. It runs
// on the hub's reader goroutine and does not block.
func (c *Client) forced(lockKey string) {
	c.mu.Lock()
	hs := make([]*hold, 0, len(c.byLock[lockKey]))
	for h := range c.byLock[lockKey] {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	for _, h := range hs {
		h.recheck()
	}
}

// recheck renews h once, now, in the background: a lock still held is
// renewed (and the renewal vouches for it), one forced away is lost with
// ErrForced. At most one recheck of a hold is in flight; messages that come
// meanwhile are answered by it. A recheck that meets a release or re-entry
// in flight is skipped: that call's reply tells the same.
func (h *hold) recheck() {
	if !h.rechecking.CompareAndSwap(false, true) {
		return
	}
	h.c.detach(func(ctx context.Context) {
		defer h.rechecking.Store(false)
		if !h.tryTurn() {
			return
		}
		defer h.endTurn()
		h.mu.Lock()
		ended, lease, until := h.ended, h.lease, h.until
		h.mu.Unlock()
		ttl := h.c.cfg.watchdog
		if lease > 0 {
			// A fixed lease keeps its end: the renewal only asks.
			ttl = time.Until(until)
		}
		if ended || ttl <= 0 {
			return
		}
		code, sent, err := h.renewOnce(ctx, ttl)
		switch {
		case err != nil:
			// The watchdog and the local deadline carry on as before.
		case code == renew.Held && lease <= 0:
			h.Renewed(sent)
		case code != renew.Held:
			h.Lost(code)
		}
	})
}

// renewOnce renews h's lock for ttl with one call of its own, outside the
// watchdog's batches, and returns the renewal's code and when it was sent.
func (h *hold) renewOnce(ctx context.Context, ttl time.Duration) (int64, time.Time, error) {
	e := renew.Entry{Key: h.ks.Lock, Field: h.ownerField, Kind: h.p.renewKind(), Holder: h}
	if e.Kind == 'r' {
		e.Set = h.ks.Readers
	}
	sent := time.Now()
	codes, err := h.c.renewBatch(ctx, []*renew.Entry{&e}, []int64{ms(ttl)})
	if err != nil {
		return 0, sent, err
	}
	return codes[0], sent, nil
}
