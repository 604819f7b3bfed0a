package renew

import "time"

// A Client's pub/sub channel may have missed a message that tells a holder
// it lost its hold (a ForceUnlock's, sent before the channel was
// subscribed, or while it was down): when the channel is confirmed, every
// hold is renewed at once (Hurry), which asks Redis. Those renewals only
// confirm the holds: they are not counted as renewals and write no record
// of a long hold (Entry.Hurried).

// Hurry makes every entry due now, so that the loop renews them all at
// once; an entry whose call is in flight is renewed again when the call
// returns, since that call may have been answered before whatever made the
// caller hurry.
//
// Hurries take effect at least hurryGap apart: one that comes sooner (a
// pub/sub connection that flaps, each confirmation a Hurry) takes effect
// hurryGap after the last, and every Hurry before then is folded into it.
// Each call of Hurry is thus followed by a renewal of every entry sent
// after it, at most hurryGap later, and a flapping connection costs each
// entry one renewal per hurryGap rather than one per reconnect.
func (r *Renewer) Hurry() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped || len(r.entries) == 0 {
		return
	}
	now := time.Now()
	at := now
	switch gap := r.hurryGap(); {
	case r.hurried.After(now):
		at = r.hurried // one is due already, after this call
	case !r.hurried.IsZero() && now.Before(r.hurried.Add(gap)):
		at = r.hurried.Add(gap)
	}
	r.hurried = at
	for e := range r.entries {
		if e.inflight != nil {
			e.again = true
		} else if e.due.After(at) {
			e.due, e.Hurried = at, true
		}
	}
	if r.wakeAt.IsZero() || at.Before(r.wakeAt) {
		r.arm(at)
	}
}

// hurryGap is how far apart Hurries take effect at least: the spacing of
// a failed call's retries.
func (r *Renewer) hurryGap() time.Duration { return min(r.cfg.Period/4, time.Second) }
