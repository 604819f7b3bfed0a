package lease

import (
	"context"
	"time"
)

// The hooks below drive the engine by hand, one step at a time: for the
// tests of the packages above, which prove the scripts and the engine
// together against a real Redis. Nothing else calls them.

// TestLease returns a lease of hd with a new owner that no acquisition
// made, taking the handle's gate when try says so (false when it is busy).
func (hd *Handle) TestLease(ctx context.Context, enter bool) (*Lease, bool) {
	if enter {
		if _, ok, _ := hd.enter(ctx, true, nil, 0, 0); !ok {
			return nil, false
		}
	}
	return newLease(hd, nil, 1), true
}

// TestAttempt sends one attempt for h and decodes its reply, with nothing
// undone if ctx ends first.
func (h *Lease) TestAttempt(ctx context.Context, ttl time.Duration, count int, q Queueing) (Reply, error) {
	cl := h.p.Attempt(h, ttl, count, q)
	if left, err := h.e.Wire.Do(ctx, cl); left {
		return Reply{}, err
	}
	defer cl.Free()
	return h.p.AttemptReply(cl.Cmd, count)
}

// TestGrant starts the bookkeeping of a grant of token whose request was
// sent at sent, and occupies the handle, as an acquisition does.
func (h *Lease) TestGrant(token uint64, sent time.Time) bool {
	if !h.granted(token, sent, 0) {
		return false
	}
	h.handle.occupy(h)
	return true
}

// TestSetToken sets the token a release sends.
func (h *Lease) TestSetToken(token uint64) { h.token = token }

// ValidUntil is when the lease stops being certain unless renewed.
func (h *Lease) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// TestSleep is how long a waiter that got r sleeps before trying again.
func (hd *Handle) TestSleep(r Reply) time.Duration {
	a := acquisition{h: &Lease{e: hd.e}}
	return a.sleep(r)
}

// GateWaiters is how many goroutines wait at the handle's gate (not
// counting one a pass in flight goes to).
func (hd *Handle) GateWaiters() int {
	hd.gate.mu.Lock()
	defer hd.gate.mu.Unlock()
	return len(hd.gate.waiters)
}

// EndCallbacks is how many callbacks wait for the lease's end (OnEnded).
func (h *Lease) EndCallbacks() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.onEnd)
}

// ForcedHeard is how many "forced" messages the engine has heard.
func (e *Engine) ForcedHeard() uint64 { return e.forcedN.Load() }
