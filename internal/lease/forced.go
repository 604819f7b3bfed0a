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

// A message can also come before the grant it is about is tracked: the
// grant's reply is on its way, or a pass or hand-off is going from one
// lease to the next. So the engine keeps the last forcedKept messages'
// keys (forcedLog), and a lease notes how many had come when it was made
// (Lease.forcedSeen, before any request of its own): once tracked
// (Engine.track, Lease.begin), it asks Redis if one about its key came
// since (or if more came than are kept).

// forcedKept is how many "forced" messages the engine remembers. Messages
// are rare (an operator's ForceUnlock) unless forged; past this many while
// a grant is on its way, the grant asks Redis whatever the keys were.
const forcedKept = 64

// forcedLog is a ring of the last forcedKept "forced" messages' lock keys,
// the n-th at keys[(n-1) % forcedKept]. Guarded by Engine.mu.
type forcedLog struct {
	n    uint64
	keys [forcedKept]string
}

func (l *forcedLog) add(key string) {
	l.keys[l.n%forcedKept] = key
	l.n++
}

// since reports whether a message about key came after the first seen.
func (l *forcedLog) since(key string, seen uint64) bool {
	if l.n-seen > forcedKept {
		return true
	}
	for i := seen; i < l.n; i++ {
		if l.keys[i%forcedKept] == key {
			return true
		}
	}
	return false
}

// forced is the hub's callback for a "forced" message about lockKey. It runs
// on the hub's reader goroutine and does not block.
func (e *Engine) forced(lockKey string) {
	e.mu.Lock()
	e.forcedLog.add(lockKey)
	e.forcedN.Store(e.forcedLog.n)
	var hs []*Lease
	for h := e.byKey[lockKey]; h != nil; h = h.sameKey {
		hs = append(hs, h)
	}
	e.mu.Unlock()
	for _, h := range hs {
		h.recheck()
	}
}

// heard is the hub's callback when the client channel is confirmed, the
// first time or after a reconnect: a "forced" message sent before it was
// not heard, so every hold asks Redis once: the watchdog renews its holds
// at once (one call per slot), and every hold with a fixed lease, which has
// no renewal, is rechecked. Before, a watchdog hold learned only at its
// next renewal, a third of the watchdog timeout later: a force moments
// after a Client's first grant (before its channel was subscribed) left the
// evicted holder working beside the next one for up to 10 s by default. It
// runs on the hub's reader goroutine and does not block.
func (e *Engine) heard() {
	e.renewer.Hurry()
	e.mu.Lock()
	var hs []*Lease
	for _, head := range e.byKey {
		for h := head; h != nil; h = h.sameKey {
			hs = append(hs, h)
		}
	}
	e.mu.Unlock()
	for _, h := range hs {
		h.mu.Lock()
		fixed := h.lease > 0
		h.mu.Unlock()
		if fixed {
			h.recheck()
		}
	}
}

// recheck renews h once, now, in the background: a lock still held is
// renewed (and the renewal vouches for it), one forced away is lost with
// ErrForced. At most one recheck of a hold is in flight; messages that come
// meanwhile make one more follow it, since the one in flight may have been
// answered before the force they tell of, but no sooner than RecheckGap
// after the one before began. A recheck that meets a release, re-entry or
// Extend in flight waits for it and then asks: that call may have run
// before the force, and its reply then says "held".
func (h *Lease) recheck() {
	h.mu.Lock()
	ended := h.ended
	h.mu.Unlock()
	if ended {
		return // its loss is told; messages about it cost nothing more
	}
	for {
		switch s := h.rechecks.Load(); {
		case s == recheckIdle && h.rechecks.CompareAndSwap(s, recheckRunning):
			h.recheckRound(0)
			return
		case s == recheckRunning && h.rechecks.CompareAndSwap(s, recheckAgain), s == recheckAgain:
			return
		}
	}
}

// RecheckGap paces the rechecks of one hold. The first runs at once, so a
// ForceUnlock is told at once; a flood of "forced" messages, which anyone
// allowed to PUBLISH can send to a Client's channel, costs Redis one
// renewal per hold per RecheckGap, where one per round trip (for each
// read hold of the name in the Client) made a neighbour's message stream
// into many times its rate in renewals. A force that comes during a flood
// is told within RecheckGap and a round trip.
const RecheckGap = 100 * time.Millisecond

// recheckRound runs one recheck after wait, and then the next one asked
// for meanwhile. The wait ends early when h ends (a loss, Close); it is not
// bounded by the cleanup timeout, which bounds each recheck's own call
// instead: each runs in a detached call of its own, started after the wait
// (one bound shared by a wait and its call, or by a long flood's rechecks,
// would run out and fail the recheck). h.rechecks is recheckRunning.
func (h *Lease) recheckRound(wait time.Duration) {
	if wait <= 0 {
		h.e.Detach(h.recheckRun)
		return
	}
	h.e.Detach(func(context.Context) {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-h.Done():
		}
		t.Stop()
		h.e.Detach(h.recheckRun)
	})
}

// recheckRun is one round of recheckRound, on a detached call's ctx.
func (h *Lease) recheckRun(ctx context.Context) {
	began := time.Now()
	h.recheckOnce(ctx)
	if h.rechecks.CompareAndSwap(recheckRunning, recheckIdle) {
		return
	}
	// Asked again meanwhile (only recheck moves running to again, and only
	// a round leaves again).
	h.rechecks.Store(recheckRunning)
	h.recheckRound(RecheckGap - time.Since(began))
}

// The states of Lease.rechecks.
const (
	recheckIdle int32 = iota
	recheckRunning
	recheckAgain
)

// recheckOnce is one recheck (recheck).
func (h *Lease) recheckOnce(ctx context.Context) {
	if h.turn(ctx) != nil {
		return // Close, or the cleanup timeout: the deadline still stands
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
	code, sent, err := h.renewCall(ctx, ttl, true)
	switch {
	case err != nil:
		// The watchdog and the local deadline carry on as before.
	case code == renew.Held && lease <= 0:
		h.Renewed(sent)
	case code != renew.Held:
		h.Lost(code)
	}
}

// renewOnce renews h's lock for ttl with one call of its own, outside the
// watchdog's batches, and returns the renewal's code and when it was sent.
func (h *Lease) renewOnce(ctx context.Context, ttl time.Duration) (int64, time.Time, error) {
	return h.renewCall(ctx, ttl, false)
}

// renewCall is renewOnce; asking, it only asks whether h still holds (a
// recheck): it writes no record of a long hold, which a hold that was
// never renewed has none of.
func (h *Lease) renewCall(ctx context.Context, ttl time.Duration, asking bool) (int64, time.Time, error) {
	e := h.p.Renewal(h)
	h.mu.Lock()
	fixed := h.lease > 0
	h.mu.Unlock()
	if fixed && e.Kind == 'm' {
		// A fixed lease's calls carry different TTLs: 'f' never shortens,
		// so one that lands late cannot cut short a later one's lease.
		e.Kind = 'f'
	}
	e.Holder, e.Since = h, h.start.UnixMilli()
	if asking {
		e.Since = 0
	}
	sent := time.Now()
	codes, err := h.e.Cfg.Renew(ctx, h.e.Wire, []*renew.Entry{&e}, []int64{ms(ttl)})
	if err != nil {
		return 0, sent, err
	}
	return codes[0], sent, nil
}
