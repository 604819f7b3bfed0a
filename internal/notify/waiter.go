package notify

import (
	"sync"
	"sync/atomic"
)

// Waiter is one goroutine's registration with a Hub. Its owner goroutine
// receives from C and then calls Take; the Hub sets its state.
//
// A Waiter is only ever woken: no message makes it a holder. Whatever a
// message says (a hand-off to its ticket, a release on its lock's channel),
// the waiter's next attempt in Redis decides, since anyone who may PUBLISH
// on the same Redis can send any message.
type Waiter struct {
	// Ticket identifies the waiter in hand-off messages; unique per Hub.
	Ticket uint64
	// C receives a value whenever Take has something new to report.
	C chan struct{}

	channel  string
	clientCh string // sharded mode: the client channel of the lock's slot
	mode     mode
	left     bool // guarded by the Hub's mu
	// scouting: the waiter was woken to try for the others of its mode
	// (scout.go); written under the Hub's mu, read by Tried without it.
	scouting atomic.Bool
	// armed: a scout took its wake-up (Take), so its next attempt is after
	// the message and tells for the others; an attempt already under way
	// when it became the scout does not.
	armed atomic.Bool

	mu      sync.Mutex
	retry   bool
	handoff bool
	closed  bool
}

// mode is which messages on its channel wake a waiter.
type mode uint8

const (
	exclusive mode = iota // Join: a "0" wakes one exclusive waiter
	shared                // JoinShared: a reader
	every                 // JoinAll: every message wakes it
)

// Event is what happened to a waiter since the last Take.
type Event struct {
	Retry bool // the lock may be free, or handed to the waiter: try again
	// Handoff: a message on the client channel named this waiter's ticket,
	// so the lock was probably handed to it. Only a hint, which lets the
	// next attempt check for the grant first: anyone may publish it.
	Handoff bool
	Closed  bool // the Hub was closed
}

// Take returns and clears what happened since the last call.
func (w *Waiter) Take() Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := Event{Retry: w.retry, Handoff: w.handoff, Closed: w.closed}
	w.retry, w.handoff = false, false
	if e.Retry && w.scouting.Load() {
		w.armed.Store(true)
	}
	return e
}

// wake asks the waiter to try again. It reports false, changing nothing,
// when a retry is already pending, so that a "wake one" message moves on to
// a waiter that has not been woken yet, and a flood of messages costs the
// waiter one attempt per Take, not one per message.
func (w *Waiter) wake() bool { return w.wakeFor(false) }

// wakeFor is wake; handoff marks the wake-up as a hand-off message's (kept
// until Take even when a retry was already pending).
func (w *Waiter) wakeFor(handoff bool) bool {
	w.mu.Lock()
	pending := w.retry
	w.retry = true
	w.handoff = w.handoff || handoff
	w.mu.Unlock()
	if pending {
		return false
	}
	w.ping()
	return true
}

// close marks the waiter's Hub closed and wakes it.
func (w *Waiter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.ping()
}

func (w *Waiter) ping() {
	select {
	case w.C <- struct{}{}:
	default:
	}
}
