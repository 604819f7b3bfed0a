package dlock

import (
	"errors"
	"sync"
	"time"
)

// errBreakerOpen is the default breaker's answer while it is open.
var errBreakerOpen = errors.New("dlock: circuit breaker open")

// breaker is the default Breaker: closed until failures infrastructure
// failures in a row, then open for cooldown, then half-open: one probe at a
// time decides whether it closes or opens again.
type breaker struct {
	failures int
	cooldown time.Duration
	changed  func(state string) // observers; called outside mu

	mu       sync.Mutex
	state    string // "closed", "open", "half-open"
	fails    int
	openedAt time.Time
	probing  bool
}

func newBreaker(failures int, cooldown time.Duration, changed func(string)) *breaker {
	return &breaker{failures: failures, cooldown: cooldown, changed: changed, state: "closed"}
}

// Allow implements Breaker.
func (b *breaker) Allow() (func(error), error) {
	b.mu.Lock()
	var moved string
	switch b.state {
	case "open":
		if time.Since(b.openedAt) < b.cooldown {
			b.mu.Unlock()
			return nil, errBreakerOpen
		}
		b.state, moved = "half-open", "half-open"
		fallthrough
	case "half-open":
		if b.probing {
			b.mu.Unlock()
			b.notify(moved)
			return nil, errBreakerOpen
		}
		b.probing = true
		b.mu.Unlock()
		b.notify(moved)
		return b.probeDone, nil
	}
	b.mu.Unlock()
	return b.closedDone, nil
}

func (b *breaker) closedDone(err error) {
	ok := err == nil
	b.mu.Lock()
	var moved string
	switch {
	case ok:
		b.fails = 0
	case b.state == "closed":
		b.fails++
		if b.fails >= b.failures {
			b.state, b.openedAt, moved = "open", time.Now(), "open"
		}
	}
	b.mu.Unlock()
	b.notify(moved)
}

func (b *breaker) probeDone(err error) {
	ok := err == nil
	b.mu.Lock()
	b.probing = false
	b.fails = 0
	if ok {
		b.state = "closed"
	} else {
		b.state, b.openedAt = "open", time.Now()
	}
	state := b.state
	b.mu.Unlock()
	b.notify(state)
}

func (b *breaker) notify(state string) {
	if state != "" && b.changed != nil {
		b.changed(state)
	}
}
