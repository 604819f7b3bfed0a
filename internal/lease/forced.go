package lease

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
func (e *Engine) forced(lockKey string) {
	e.mu.Lock()
	var hs []*Lease
	for h := e.byKey[lockKey]; h != nil; h = h.sameKey {
		hs = append(hs, h)
	}
	e.mu.Unlock()
	for _, h := range hs {
		h.recheck()
	}
}

// recheck renews h once, now, in the background: a lock still held is
// renewed (and the renewal vouches for it), one forced away is lost with
// ErrForced. At most one recheck of a hold is in flight; messages that come
// meanwhile are answered by it. A recheck that meets a release or re-entry
// in flight is skipped: that call's reply tells the same.
func (h *Lease) recheck() {
	if !h.rechecking.CompareAndSwap(false, true) {
		return
	}
	h.e.Detach(func(ctx context.Context) {
		defer h.rechecking.Store(false)
		if !h.tryTurn() {
			return
		}
		defer h.endTurn()
		h.mu.Lock()
		ended, lease, until := h.ended, h.lease, h.until
		h.mu.Unlock()
		ttl := h.e.Cfg.Watchdog
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
func (h *Lease) renewOnce(ctx context.Context, ttl time.Duration) (int64, time.Time, error) {
	e := h.p.Renewal(h)
	e.Holder, e.Since = h, h.start.UnixMilli()
	sent := time.Now()
	codes, err := h.e.Cfg.Renew(ctx, h.e.Wire, []*renew.Entry{&e}, []int64{ms(ttl)})
	if err != nil {
		return 0, sent, err
	}
	return codes[0], sent, nil
}
