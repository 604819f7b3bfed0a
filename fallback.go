package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/tier"
)

// Fallback is a second lock tier that a Client built WithFallback uses when
// Redis fails: a SQL named lock (package sqllock's *Locker) or anything with
// the same contract. Run must wait up to the request's Wait, run fn
// at most once with a context that carries the grant (ContextWithGrant, with
// Backend set) and is cancelled with a cause wrapping ErrLockLost when the
// hold is lost, always release, return fn's error untouched, wrap
// ErrWaitTimeout when the wait ran out, and issue a fencing token above the
// request's TokenFloor. A Fallback must be safe for concurrent use.
type Fallback interface {
	// Backend names the tier in grants and observations ("mysql", "postgres").
	Backend() string
	// Run runs fn holding the lock req asks for.
	Run(ctx context.Context, req FallbackRequest, fn func(context.Context) error) error
}

// Breaker decides whether a call may try Redis: Allow returns an error
// while the circuit is open, or a done func that must be called once with
// the Redis failure (nil when Redis worked; contention counts as working).
// A call whose caller's ctx ended before Redis answered proves nothing
// about Redis: done gets nil, unless the Breaker refused a call since it
// was last given nil, so that this call may be its half-open probe; then
// done gets an error wrapping the ctx's error (context.Canceled or
// context.DeadlineExceeded), so that the breaker does not close on a probe
// that was never answered (gobreaker's Settings.IsExcluded can leave such
// an error uncounted, letting the next call probe at once; otherwise it
// opens the breaker again). The default breaker counts such a call neither
// way and lets the next caller probe. sony/gobreaker v2's
// *TwoStepCircuitBreaker[T] satisfies it (v2.4.0, which sqllock's tests
// use; check the signature of its Allow in another version). A Breaker
// must be safe for concurrent use.
type Breaker interface {
	// Allow reports whether a call may try Redis now: a non-nil error
	// while the circuit is open, else a done func to call once with the
	// call's Redis failure (nil when Redis worked).
	Allow() (done func(err error), err error)
}

// FallbackOption configures WithFallback. Options are plain function values:
// one may be given to several Clients, concurrently.
type FallbackOption func(*fallbackConfig) error

type fallbackConfig struct {
	breaker    Breaker
	quarantine time.Duration // 0: the watchdog timeout plus its drift margin
	recovery   time.Duration // 0: twice the quarantine
	strict     bool
}

// FallbackBreaker sets the circuit breaker in front of Redis. Default: a
// breaker that opens after 5 infrastructure failures in a row and lets one
// probe through every 5s while open.
func FallbackBreaker(b Breaker) FallbackOption {
	return func(c *fallbackConfig) error {
		if b == nil {
			return fmt.Errorf("%w: nil breaker", ErrInvalidArgument)
		}
		c.breaker = b
		return nil
	}
}

// FallbackQuarantine sets how long after this Client last reached Redis a
// fallback grant waits, so that every Redis holder has been told of its loss
// first; a call that sees Redis answer during that wait is refused (an
// error wrapping ErrUnavailable) rather than fall back. Default: the
// watchdog timeout plus its drift margin, which covers watchdog-mode holds;
// holds with a fixed lease longer than that need at least that lease.
func FallbackQuarantine(d time.Duration) FallbackOption {
	return func(c *fallbackConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative quarantine", ErrInvalidArgument)
		}
		c.quarantine = d
		return nil
	}
}

// FallbackRecovery sets how long after Redis answers again (having failed)
// a Redis grant also takes the fallback lock, so that it excludes fallback
// holders that are still inside fn, and lifts the name's Redis fencing
// counter above the token the fallback issued. It must cover the time other
// Clients take to notice that Redis is back (their breaker's cooldown and
// probes): a Client still falling back after another's window closed can
// overlap its holds (the fencing token exposes it). Within one Client, a
// Redis grant also takes the fallback lock while a fallback call of the
// same name waits or holds, window or not. Default: twice the quarantine,
// at least 10s.
func FallbackRecovery(d time.Duration) FallbackOption {
	return func(c *fallbackConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative recovery window", ErrInvalidArgument)
		}
		c.recovery = d
		return nil
	}
}

// FallbackStrict refuses the fallback (WithLock fails with the Redis error)
// unless the fallback can tell that no other Client has reached Redis within
// the quarantine: the Fallback must implement RedisWitness. Without it, a
// Client cut off from a Redis that others still reach may grant a lock in
// the fallback tier that a Redis holder also has (the fencing token exposes
// it; see WithFallback).
func FallbackStrict() FallbackOption {
	return func(c *fallbackConfig) error {
		c.strict = true
		return nil
	}
}

// RedisWitness is what FallbackStrict needs of a Fallback: a record, shared
// by every Client, of when each last reached Redis. Its methods are called
// from any goroutine of any Client: they must be safe for concurrent use.
type RedisWitness interface {
	// SawRedis records that client reached Redis at the database's now.
	SawRedis(ctx context.Context, client string) error
	// OthersSawRedis reports whether a client other than client recorded
	// reaching Redis within the last d.
	OthersSawRedis(ctx context.Context, client string, d time.Duration) (bool, error)
}

// WithFallback makes the Client's WithLock fall back to f when Redis fails,
// behind a circuit breaker: WithLock runs on Redis while Redis works and on
// f, a SQL named lock (sqllock.MySQL, sqllock.Postgres) or anything else
// that implements Fallback, when it does not. Only infrastructure failures
// fall back (connection refused or reset, timeouts, READONLY, LOADING,
// MASTERDOWN, CLUSTERDOWN, an open breaker); contention (the wait ran out),
// a cancelled ctx and whatever fn returns never do, and never count against
// the breaker. fn runs at most once per call: a fallback happens only
// before fn starts.
//
// A SQL lock does not exclude a Redis holder, so the tiers follow three
// rules:
//
//   - Quarantine: a fallback grant waits until the quarantine (the watchdog
//     timeout plus its drift margin, FallbackQuarantine) has passed since
//     this Client last reached Redis, by which time every Redis holder whose
//     Redis is gone has been told of its loss. Redis dying mid-hold
//     therefore never leaves two holders. A call whose wait sees Redis
//     answer again (a holder renewed, and holds on) is refused: WithLock
//     fails with an error wrapping ErrUnavailable.
//   - Recovery: for the recovery window after Redis answers again
//     (FallbackRecovery, at least 10s), and for as long as a fallback call
//     of the name in the same Client waits or holds, Redis grants also take
//     the SQL lock and lift the name's Redis fencing counter above the SQL
//     token, so they wait for fallback holders still inside fn, and later
//     Redis tokens stay above the fallback's. A fallback grant, and a lift
//     that fails (Redis failing again, the caller's ctx ending), leave a
//     lift owed for the name: the Client's Redis grants of that name keep
//     taking the SQL lock, and lifting, until a lift succeeds, whatever the
//     window, since a Redis grant alone would hand out a token below the
//     SQL token fn already ran with (the name's Redis counter counts on
//     from before the outage). Only the Client that owes a lift knows of
//     it: another Client's first grant of such a name after the window can
//     still get a Redis token below that SQL token.
//   - One token order: fallback tokens are above the highest Redis token
//     the Client saw and at least the database clock in microseconds; Redis
//     tokens start from the Redis clock. With clocks in step, tokens of both
//     tiers increase together.
//
// What is not guaranteed: a Client cut off from a Redis that others still
// reach falls back (after its quarantine) and can hold the SQL lock while a
// Redis holder is inside fn. The fencing token exposes it: the later
// grant's token is higher, so the resource rejects the earlier holder's
// writes. FallbackStrict refuses the fallback in that case instead: Clients
// record when they last reached Redis in a table of the fallback database
// (RedisWitness), and a Client falls back only when no other did within
// the quarantine plus a watchdog timeout. A Client that made no Redis call
// during an outage, or that is still falling back after another Client's
// recovery window ended, can likewise overlap a fallback holder; the token
// exposes it.
func WithFallback(f Fallback, opts ...FallbackOption) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: nil fallback", ErrInvalidArgument)
		}
		fc := fallbackConfig{}
		for i, o := range opts {
			if o == nil {
				return fmt.Errorf("%w: fallback option %d is nil", ErrInvalidArgument, i)
			}
			if err := o(&fc); err != nil {
				return err
			}
		}
		if fc.strict {
			if _, ok := f.(RedisWitness); !ok {
				return fmt.Errorf("%w: FallbackStrict needs a Fallback that implements RedisWitness", ErrInvalidArgument)
			}
		}
		c.fallback, c.fallbackCfg = f, fc
		return nil
	}
}

// FallbackReason names the class of a Redis failure that made WithLock fall
// back, for metrics with few label values: "breaker_open", "refused",
// "reset", "timeout", "readonly", "loading", "masterdown", "clusterdown",
// "unavailable" or "other". Safe for concurrent use.
func FallbackReason(err error) string { return tier.Reason(err) }

// newTiers builds the fallback tier of c's WithFallback.
func (c *Client) newTiers() *tier.Tiers {
	fc := c.cfg.fallbackCfg
	cfg := tier.Config{
		Fallback: fallbackTier{c.cfg.fallback}, Breaker: fc.breaker, Quarantine: fc.quarantine, Recovery: fc.recovery,
		ClientID: c.cfg.ClientID, Watchdog: c.cfg.Watchdog,
		Redis: func(ctx context.Context, req tier.Request, fn func(context.Context) error) error {
			return c.withRedisLock(ctx, fallbackRequest(req), fn)
		},
		Raise: func(ctx context.Context, name string, tok uint64) error {
			return kind.RaiseFence(ctx, c.e, name, tok)
		},
		Detach: c.e.Detach, Logger: c.cfg.Logger, Observers: c.cfg.Observers,
	}
	if fc.strict {
		cfg.Witness = c.cfg.fallback.(RedisWitness)
	}
	return tier.New(cfg)
}

// fallbackTier is a Fallback as the tier calls it, with the tier's request.
type fallbackTier struct{ f Fallback }

func (t fallbackTier) Backend() string { return t.f.Backend() }

func (t fallbackTier) Run(ctx context.Context, req tier.Request, fn func(context.Context) error) error {
	return t.f.Run(ctx, fallbackRequest(req), fn)
}
