package dlock

import (
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/renew"
)

// hold is one continuous possession of a lock by a handle, from the grant to
// the final release or the loss. Re-entries share it.
type hold struct {
	mu    *Mutex
	token uint64
	start time.Time
	done  chan struct{}
	entry *renew.Entry // &renewal, or nil when nothing needs renewing

	renewal renew.Entry

	lease time.Duration // > 0: a fixed lease, never renewed past until
	until time.Time     // the fixed lease's end

	lk         sync.Mutex
	ended      bool
	err        error     // the loss cause; nil when released
	validUntil time.Time // the hold is certain until then (monotonic clock)
	timer      *time.Timer
	onEnd      []func(error)
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// newHold starts the bookkeeping of a grant: renewal in watchdog mode, the
// local deadline that declares the hold lost, and the client's registry.
// sent is when the granting call was sent (the TTL started after it); lease
// <= 0 means watchdog mode; claim is set when the lock arrived by hand-off
// with a TTL of only the claim window. It reports false, with the hold not
// registered, when the client is closing.
func newHold(m *Mutex, token uint64, sent time.Time, lease, claim time.Duration) (*hold, bool) {
	c := m.c
	h := &hold{mu: m, token: token, start: time.Now(), done: make(chan struct{})}
	h.lk.Lock()
	defer h.lk.Unlock()
	if lease <= 0 {
		ttl := c.cfg.watchdog
		first := c.cfg.watchdog / 3
		if claim > 0 {
			ttl = min(ttl, claim)
			first = min(first, claim/2)
		}
		h.validUntil = sent.Add(ttl)
		h.renewal = renew.Entry{Key: m.ks.Lock, Field: m.renewField, TTL: c.cfg.watchdog, Holder: h}
		h.entry = &h.renewal
		c.renewer.Add(h.entry, first)
	} else {
		h.lease, h.until = lease, sent.Add(lease)
		h.validUntil = h.until
		if claim > 0 && claim < lease {
			// Redis has the hold for the claim window only, until the one
			// extension to the lease the caller asked for succeeds.
			h.validUntil = sent.Add(claim)
			h.renewal = renew.Entry{Key: m.ks.Lock, Field: m.renewField, Until: h.until, Holder: h}
			h.entry = &h.renewal
			c.renewer.Add(h.entry, claim/2)
		}
	}
	h.timer = time.AfterFunc(time.Until(h.validUntil), h.checkDeadline)
	if !c.track(h) {
		return h, false
	}
	return h, true
}

// errClosedHold ends the holds that Close releases, or that were granted
// while it ran: their holders must stop as for any other loss.
var errClosedHold = fmt.Errorf("%w: the client was closed: %w", ErrLockLost, ErrClosed)

// Lost implements renew.Holder.
func (h *hold) Lost() {
	h.lose(fmt.Errorf("%w: renewal found another owner", ErrLockLost))
}

// Renewed implements renew.Holder.
func (h *hold) Renewed(sent time.Time) {
	h.lk.Lock()
	defer h.lk.Unlock()
	if h.lease > 0 {
		h.validUntil = h.until // the one extension to the full lease
		return
	}
	if v := sent.Add(h.mu.c.cfg.watchdog); v.After(h.validUntil) {
		h.validUntil = v
	}
}

// checkDeadline runs when the local deadline passes: unless renewal has moved
// it meanwhile, the hold can no longer be vouched for.
func (h *hold) checkDeadline() {
	h.lk.Lock()
	if h.ended {
		h.lk.Unlock()
		return
	}
	if left := time.Until(h.validUntil); left > 0 {
		h.timer.Reset(left)
		h.lk.Unlock()
		return
	}
	expired := h.lease > 0 && !time.Now().Before(h.until)
	h.lk.Unlock()
	if expired {
		h.lose(fmt.Errorf("%w: lease of %v expired", ErrLockLost, h.lease))
		return
	}
	h.lose(fmt.Errorf("%w: renewal could not confirm the hold within its TTL", ErrLockLost))
}

// lose ends the hold with cause; the handle keeps it until Unlock. The loss
// is logged and reported to observers before Done closes, so that whoever
// wakes on Done sees it counted.
func (h *hold) lose(cause error) {
	h.end(cause, func() {
		c := h.mu.c
		c.cfg.logger.Warn("dlock: lock lost", "name", h.mu.name, "cause", cause)
		for _, o := range c.cfg.observers {
			o.Lost(h.mu.kind, h.mu.name, cause)
		}
	})
}

// end marks the hold over, stops its renewal and deadline, runs before (if
// not nil), closes done and runs the end callbacks. It reports false, doing
// nothing, if the hold had already ended.
func (h *hold) end(cause error, before func()) bool {
	h.lk.Lock()
	if h.ended {
		h.lk.Unlock()
		return false
	}
	h.ended = true
	h.err = cause
	if h.timer != nil {
		h.timer.Stop()
	}
	callbacks := h.onEnd
	h.onEnd = nil
	h.lk.Unlock()
	if h.entry != nil {
		// Not Remove: a loss must be told at once, not after a renewal call
		// that may hang on the very trouble that caused it.
		h.mu.c.renewer.Cancel(h.entry)
	}
	h.mu.c.untrack(h)
	if before != nil {
		before()
	}
	close(h.done)
	for _, f := range callbacks {
		f(cause)
	}
	return true
}

// onEnded registers f to run when the hold ends (at once if it has).
func (h *hold) onEnded(f func(error)) {
	h.lk.Lock()
	if !h.ended {
		h.onEnd = append(h.onEnd, f)
		h.lk.Unlock()
		return
	}
	err := h.err
	h.lk.Unlock()
	f(err)
}

func (h *hold) lostErr() error {
	h.lk.Lock()
	defer h.lk.Unlock()
	return h.err
}
