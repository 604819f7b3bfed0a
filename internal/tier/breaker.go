// Package tier holds what the fallback tier decides with: the default
// circuit breaker, and which Redis failures count as an outage.
package tier

import (
	"context"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/redis/go-redis/v9"

	"errors"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// errBreakerOpen is the default breaker's answer while it is open.
var errBreakerOpen = errors.New("dlock: circuit breaker open")

// errAbandoned marks what a call's done gets when its caller's ctx ended
// before Redis answered (Tiers.abandoned): the call proves nothing about
// Redis, so the default breaker counts it neither as a success nor as a
// failure.
var errAbandoned = errors.New("dlock: the caller gave up before Redis answered")

// breaker is the default dlock.Breaker: closed until failures infrastructure
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

func NewBreaker(failures int, cooldown time.Duration, changed func(string)) *breaker {
	return &breaker{failures: failures, cooldown: cooldown, changed: changed, state: "closed"}
}

// Allow implements dlock.Breaker.
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
	if errors.Is(err, errAbandoned) {
		return // neither resets nor adds to the failures in a row
	}
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
	if errors.Is(err, errAbandoned) {
		// The probe's caller left before Redis answered: stay half-open,
		// so that the next caller probes (one at a time, as before).
		b.mu.Unlock()
		return
	}
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

// IsInfrastructure reports whether err means Redis could not be used, as
// opposed to contention, a cancelled ctx or a caller's mistake.
func IsInfrastructure(err error) bool {
	if err == nil || errors.Is(err, lease.ErrWaitTimeout) || errors.Is(err, lease.ErrInvalidArgument) ||
		errors.Is(err, context.Canceled) || errors.Is(err, lease.ErrClosed) || errors.Is(err, lease.ErrUpgrade) {
		return false
	}
	if errors.Is(err, lease.ErrUnavailable) || errors.Is(err, lease.ErrNotReplicated) || lease.IsTransport(err) {
		return true
	}
	for _, prefix := range []string{"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// Reason names the class of a Redis failure that made WithLock fall back
// (dlock.FallbackReason).
func Reason(err error) string {
	switch {
	case errors.Is(err, errBreakerOpen) || errors.Is(err, ErrOpenBreaker):
		return "breaker_open"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "reset"
	case redis.HasErrorPrefix(err, "READONLY"):
		return "readonly"
	case redis.HasErrorPrefix(err, "LOADING"):
		return "loading"
	case redis.HasErrorPrefix(err, "MASTERDOWN"):
		return "masterdown"
	case redis.HasErrorPrefix(err, "CLUSTERDOWN"):
		return "clusterdown"
	case errors.Is(err, lease.ErrUnavailable):
		return "unavailable"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) {
		return "timeout"
	}
	return "other"
}

// ErrOpenBreaker marks a refusal by any Breaker (gobreaker's included).
var ErrOpenBreaker = errors.New("dlock: circuit breaker refused the call")
