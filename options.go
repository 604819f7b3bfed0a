package dlock

import (
	"fmt"
	"log/slog"
	"time"
)

// Option configures a Client. Options are applied by New in order.
type Option func(*config) error

type config struct {
	watchdog       time.Duration
	logger         *slog.Logger
	observers      []Observer
	clientID       string
	claim          time.Duration
	recheck        time.Duration
	linger         time.Duration
	fenceTTL       time.Duration
	closeTimeout   time.Duration // bounds Close
	cleanupTimeout time.Duration // bounds each detached cleanup
	replicas       int           // > 0: WithReplicaAck
	replicaTimeout time.Duration
	maxHold        time.Duration // > 0: WithMaxHold
	spinMin        time.Duration // > 0: spin mode
	spinMax        time.Duration
	fallback       Fallback // WithFallback
	fallbackCfg    fallbackConfig
}

func defaultConfig() config {
	return config{
		watchdog:       30 * time.Second,
		logger:         slog.New(slog.DiscardHandler),
		claim:          2 * time.Second,
		recheck:        3 * time.Second,
		linger:         2 * time.Second,
		fenceTTL:       24 * time.Hour,
		closeTimeout:   5 * time.Second,
		cleanupTimeout: 5 * time.Second,
	}
}

// WithMaxHold sets how long any lock hold of the Client may last (see
// MaxHold, which overrides it per WithLock call); 0, the default, leaves
// holds unbounded. Elections are not bounded by it: a leader leads until it
// resigns or is lost. d must not be negative.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: max hold %v is negative", ErrInvalidArgument, d)
		}
		c.maxHold = d
		return nil
	}
}

// MaxSpinBackoff is the longest backoff WithSpin accepts.
const MaxSpinBackoff = time.Minute

// MinWatchdogTimeout is the shortest watchdog timeout accepted.
const MinWatchdogTimeout = 30 * time.Millisecond

// WithWatchdogTimeout sets the TTL of locks held in watchdog mode (lease <= 0).
// The watchdog renews such locks every third of it, and a holder that cannot
// confirm its hold for a whole timeout declares the lock lost. Default 30s,
// Redisson's lockWatchdogTimeout; at least MinWatchdogTimeout.
func WithWatchdogTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < MinWatchdogTimeout {
			return fmt.Errorf("%w: watchdog timeout %v is shorter than %v", ErrInvalidArgument, d, MinWatchdogTimeout)
		}
		c.watchdog = d
		return nil
	}
}

// WithLogger sets the logger for renewal trouble, lost holds and pub/sub
// reconnects. Fencing tokens and owner ids are never logged. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidArgument)
		}
		c.logger = l
		return nil
	}
}

// WithObserver adds an Observer that is told about every acquisition,
// release, renewal and loss. It may be given several times.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidArgument)
		}
		c.observers = append(c.observers, o)
		return nil
	}
}

// WithClientID sets the id that prefixes this client's owner fields
// ("<id>:<owner>") in the lock hash. Default: "<host>/<pid>/<random>", which
// ParseClientID reads back for operators. Two live clients must never share
// an id.
func WithClientID(id string) Option {
	return func(c *config) error {
		if id == "" || len(id) > 128 {
			return fmt.Errorf("%w: client id must be 1 to 128 bytes", ErrInvalidArgument)
		}
		for _, r := range id {
			if r == ' ' || r == ':' || r < 0x20 {
				return fmt.Errorf("%w: client id %q contains a space, ':' or a control character", ErrInvalidArgument, id)
			}
		}
		c.clientID = id
		return nil
	}
}

// WithHandoffClaim sets how long a lock handed straight to a waiting process
// stays valid before that process confirms it. It bounds how long a waiter
// that crashed while queued can delay the others. Default 2s; at least 10ms.
func WithHandoffClaim(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: hand-off claim %v is shorter than 10ms", ErrInvalidArgument, d)
		}
		c.claim = d
		return nil
	}
}

// WithCloseTimeout bounds how long Close takes: telling holders, releasing
// the locks the client still holds, closing the pub/sub connection and
// waiting for background cleanups. Default 5s. Locks it could not release
// expire by their TTL.
func WithCloseTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: close timeout must be positive", ErrInvalidArgument)
		}
		c.closeTimeout = d
		return nil
	}
}

// WithCleanupTimeout bounds the work dlock finishes in the background after
// its caller has gone: a release whose ctx had ended (Unlock still sends it),
// leaving a wait queue, giving back a grant whose caller's ctx ended while
// the reply was on its way. Default 5s. Work it could not finish in time is
// undone by the keys' TTLs.
func WithCleanupTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: cleanup timeout must be positive", ErrInvalidArgument)
		}
		c.cleanupTimeout = d
		return nil
	}
}

// withRecheck sets how often a waiter re-checks a lock on its own (default
// 3s); tests shorten or lengthen it.
func withRecheck(d time.Duration) Option {
	return func(c *config) error {
		c.recheck = d
		return nil
	}
}

// WithSpin makes the Client's locks wait by polling instead of pub/sub: after
// a failed attempt a waiter sleeps a random time between half and all of a
// backoff that starts at min and doubles up to max (never past the holder's
// TTL or the end of the wait), then tries again. Use it where pub/sub is not
// available (some proxies and managed offerings) or not wanted; it costs a
// script call per waiter per backoff, where pub/sub mode costs about one per
// grant. Typical values: 1ms and 128ms; max is at most MaxSpinBackoff. The
// semantics are otherwise the same.
func WithSpin(min, max time.Duration) Option {
	return func(c *config) error {
		if min < time.Microsecond*100 || max < min || max > MaxSpinBackoff {
			return fmt.Errorf("%w: spin backoff needs 100µs <= min <= max <= %v, got %v and %v", ErrInvalidArgument, MaxSpinBackoff, min, max)
		}
		c.spinMin, c.spinMax = min, max
		return nil
	}
}
