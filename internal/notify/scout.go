package notify

// Scouting bounds what one message costs a process. A message that may let
// several waiters of a channel through at once (a latch's count-down to
// zero, read holds released) would wake them all, and each would ask Redis:
// one PUBLISH, from anyone who may publish, would cost a process one Redis
// call per waiting goroutine. Instead it wakes one of them, the scout. Its
// attempt tells for all, since they wait on the same key: when it got
// through (Tried with true), the others are woken to go through too; when
// not, the message was false or stale, and they sleep on. A message that
// comes while the scout is out is remembered, and a false round is then
// followed by another, so that no true message is missed: the scout's
// attempt may have read Redis before that message's change. A scout that
// leaves before telling (its ctx ended) hands the round to another waiter.

// round is one mode's scouting on a channel.
type round struct {
	scout *Waiter // out, trying for the others; nil when no round is on
	again bool    // a message came while the scout was out
}

// roundOf returns the index in channel.rounds of mode m's round: the modes
// whose waiters one message may all let through.
func roundOf(m mode) int {
	if m == every {
		return 1
	}
	return 0 // shared
}

// broadcast lets the waiters of mode m (shared or every) know of a message
// that may let all of them through: it wakes one as the scout, unless a
// round is on (then the message is remembered for it). One waiter needs no
// scout. The caller holds the Hub's mu.
func (ch *channel) broadcast(m mode) {
	r := &ch.rounds[roundOf(m)]
	if r.scout != nil {
		r.again = true
		return
	}
	var first *Waiter
	n := 0
	for _, w := range ch.waiters {
		if w.mode == m {
			if first == nil {
				first = w
			}
			n++
		}
	}
	switch {
	case n == 0:
		return
	case n > 1:
		r.scout = first
		first.armed.Store(false)
		first.scouting.Store(true)
	}
	first.wake()
}

// Tried tells the Hub the outcome of an attempt w made: whether it got
// through (granted, or the latch it waits on is open). Only the attempt of
// a scout after it took its wake-up counts; for any other it costs one
// atomic load. Call it from w's own goroutine after each attempt. Safe for
// concurrent use.
func (h *Hub) Tried(w *Waiter, through bool) {
	if w == nil || !w.armed.Load() {
		return // no scout, or its attempt began before its wake-up
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// Cleared first: a new round (endRound's) may pick w again.
	w.scouting.Store(false)
	w.armed.Store(false)
	if ch := h.chans[w.channel]; ch != nil {
		ch.endRound(w, through)
	}
}

// endRound ends the round w scouted: through, the others of its mode are
// woken; else, when a message came meanwhile, a new round begins. The
// caller holds the Hub's mu.
func (ch *channel) endRound(w *Waiter, through bool) {
	r := &ch.rounds[roundOf(w.mode)]
	if r.scout != w {
		return
	}
	again := r.again
	*r = round{}
	switch {
	case through:
		for _, x := range ch.waiters {
			if x != w && x.mode == w.mode {
				x.wake()
			}
		}
	case again:
		ch.broadcast(w.mode)
	}
}

// scoutLeft hands the round of w, which left (and is no longer among ch's
// waiters), to another waiter: the message it was woken for is still
// untold. The caller holds the Hub's mu.
func (ch *channel) scoutLeft(w *Waiter) {
	if !w.scouting.Load() {
		return
	}
	w.scouting.Store(false)
	w.armed.Store(false)
	r := &ch.rounds[roundOf(w.mode)]
	if r.scout != w {
		return
	}
	*r = round{}
	ch.broadcast(w.mode)
}
