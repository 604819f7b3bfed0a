package notify

import (
	"sync"
	"time"
)

// Waiter is one goroutine's registration with a Hub. Its owner goroutine
// receives from C and then calls Take; the Hub sets its state.
type Waiter struct {
	// Ticket identifies the waiter in hand-off messages; unique per Hub.
	Ticket uint64
	// C receives a value whenever Take has something new to report.
	C chan struct{}

	channel string
	shared  bool // a reader: see JoinShared
	left    bool // guarded by the Hub's mu

	mu      sync.Mutex
	granted bool
	token   uint64
	ttl     time.Duration
	retry   bool
	closed  bool
}

// Event is what happened to a waiter since the last Take.
type Event struct {
	Granted bool          // the lock was handed to this waiter
	Token   uint64        // its fencing token, when Granted
	TTL     time.Duration // the TTL Redis gave the hand-off, when Granted
	Retry   bool          // the lock may be free: try again
	Closed  bool          // the Hub was closed
}

// Take returns and clears what happened since the last call.
func (w *Waiter) Take() Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := Event{Granted: w.granted, Token: w.token, TTL: w.ttl, Retry: w.retry, Closed: w.closed}
	w.granted, w.retry = false, false
	return e
}

// signal applies set and pings C. It reports false, changing nothing, when
// the waiter already has a retry pending, so that a "wake one" message
// moves on to a waiter that has not been woken yet.
func (w *Waiter) signal(set func(*Waiter)) bool {
	w.mu.Lock()
	pending := w.retry || w.granted
	granted, closed := w.granted, w.closed
	set(w)
	changed := w.granted != granted || w.closed != closed || (!pending && w.retry)
	w.mu.Unlock()
	if !changed {
		return false
	}
	select {
	case w.C <- struct{}{}:
	default:
	}
	return true
}
