package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
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
// the Redis failure (nil when Redis worked; contention and cancellation
// count as working). sony/gobreaker v2's *TwoStepCircuitBreaker satisfies
// it. A Breaker must be safe for concurrent use.
type Breaker interface {
	Allow() (done func(err error), err error)
}

// FallbackOption configures WithFallback.
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
// first. Default: the watchdog timeout plus its drift margin, which covers
// watchdog-mode holds; holds with a fixed lease longer than that need at
// least that lease.
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
// overlap its holds (the fencing token exposes it). Default: twice the
// quarantine, at least 10s.
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
// it; see the package doc).
func FallbackStrict() FallbackOption {
	return func(c *fallbackConfig) error {
		c.strict = true
		return nil
	}
}

// RedisWitness is what FallbackStrict needs of a Fallback: a record, shared
// by every Client, of when each last reached Redis.
type RedisWitness interface {
	// SawRedis records that client reached Redis at the database's now.
	SawRedis(ctx context.Context, client string) error
	// OthersSawRedis reports whether a client other than client recorded
	// reaching Redis within the last d.
	OthersSawRedis(ctx context.Context, client string, d time.Duration) (bool, error)
}

// WithFallback makes the Client's WithLock fall back to f when Redis fails,
// behind a circuit breaker: only infrastructure failures fall back
// (connection refused or reset, timeouts, READONLY, LOADING, MASTERDOWN,
// CLUSTERDOWN, an open breaker); contention (the wait ran out), a cancelled
// ctx and whatever fn returns never do, and never count against the breaker.
// fn runs at most once per call: a fallback happens only before fn starts.
// See the package doc for what the tiers guarantee together.
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

// tiers is a Client's fallback state.
type tiers struct {
	c       *Client
	f       Fallback
	witness RedisWitness // nil unless strict
	cfg     fallbackConfig

	maxToken atomic.Uint64 // the highest Redis token this Client saw

	mu            sync.Mutex
	downSince     time.Time // first infrastructure failure since Redis last worked
	recoveryUntil time.Time // Redis grants also take the fallback lock until then
	lastWitness   time.Time
}

func newTiers(c *Client) *tiers {
	t := &tiers{c: c, f: c.cfg.fallback, cfg: c.cfg.fallbackCfg}
	if t.cfg.breaker == nil {
		t.cfg.breaker = tier.NewBreaker(5, 5*time.Second, c.e.ObserveBreaker)
	}
	if t.cfg.quarantine == 0 {
		t.cfg.quarantine = c.cfg.Watchdog + lease.DriftMargin(c.cfg.Watchdog)
	}
	if t.cfg.recovery == 0 {
		t.cfg.recovery = max(2*t.cfg.quarantine, 10*time.Second)
	}
	if t.cfg.strict {
		t.witness = t.f.(RedisWitness)
	}
	return t
}

// withLock is WithLock with a fallback tier.
func (t *tiers) withLock(ctx context.Context, req FallbackRequest, fn func(context.Context) error) error {
	start := time.Now()
	var reason error
	done, err := t.cfg.breaker.Allow()
	if err != nil {
		reason = fmt.Errorf("%w: %w: %w", ErrUnavailable, tier.ErrOpenBreaker, err)
	} else {
		started, err := t.onRedis(ctx, req, start, done, fn)
		switch {
		case started:
			return err
		case ctx.Err() != nil || !tier.IsInfrastructure(err):
			done(nil) // contention and cancellation are not Redis' fault
			return err
		}
		done(err)
		reason = err
		t.redisFailed()
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := t.mayFallBack(ctx, start.Add(req.Wait)); err != nil {
		return errors.Join(reason, err)
	}
	t.c.e.ObserveFallback(req.Kind, req.Name, t.f.Backend(), reason)
	return t.onFallback(ctx, req, start, fn)
}

// onRedis runs fn under the Redis lock; started reports whether fn ran.
// While Redis recovers from an outage, fn also takes the fallback lock:
// fallback holders of the outage may still be inside fn.
func (t *tiers) onRedis(ctx context.Context, req FallbackRequest, start time.Time, done func(error), fn func(context.Context) error) (started bool, err error) {
	err = t.c.withRedisLock(ctx, req, func(fctx context.Context) error {
		started = true
		done(nil)
		t.redisWorked(fctx)
		if !t.recovering() {
			return fn(fctx)
		}
		// Take the fallback lock too, above our token, and lift the Redis
		// counter to the token the fallback issued, so that the name's
		// later Redis tokens stay above it.
		sreq := req
		sreq.Wait = max(req.Wait-time.Since(start), 0)
		sreq.TokenFloor = max(req.TokenFloor, TokenFrom(fctx))
		err := t.f.Run(fctx, sreq, func(sctx context.Context) error {
			tok := TokenFrom(sctx)
			t.raiseRedisToken(sctx, req.Name, tok)
			return fn(ContextWithGrant(sctx, Grant{Name: req.Name, Token: tok, Backend: BackendRedis}))
		})
		if err != nil && fctx.Err() != nil && ctx.Err() == nil && !errors.Is(err, ErrLockLost) {
			err = context.Cause(fctx) // the Redis hold was lost while waiting
		}
		return err
	})
	return started, err
}

// onFallback runs fn under the fallback tier's lock, reporting the
// acquisition to the observers.
func (t *tiers) onFallback(ctx context.Context, req FallbackRequest, start time.Time, fn func(context.Context) error) error {
	freq := req
	freq.Wait = max(req.Wait-time.Since(start), 0)
	freq.TokenFloor = max(req.TokenFloor, t.maxToken.Load())
	finish := t.c.e.ObserveAcquire(ctx, req.Kind, req.Name)
	granted := false
	err := t.f.Run(ctx, freq, func(fctx context.Context) error {
		granted = true
		finish(Acquisition{Kind: req.Kind, Name: req.Name, Acquired: true, Waited: time.Since(start), Backend: t.f.Backend()})
		return fn(fctx)
	})
	if !granted {
		a := Acquisition{Kind: req.Kind, Name: req.Name, Err: err, Waited: time.Since(start), Backend: t.f.Backend()}
		if errors.Is(err, ErrWaitTimeout) {
			a.TimedOut, a.Err = true, nil
		}
		finish(a)
	}
	return err
}

// mayFallBack waits out the quarantine (until every Redis holder has been
// told of its loss), within the wait, and in strict mode checks that no
// other Client still reaches Redis.
func (t *tiers) mayFallBack(ctx context.Context, deadline time.Time) error {
	t.mu.Lock()
	ready := t.downSince.Add(t.cfg.quarantine)
	t.mu.Unlock()
	if d := time.Until(ready); d > 0 {
		if ready.After(deadline) {
			return fmt.Errorf("%w: the fallback opens %v after Redis failed (quarantine), later than the wait allows", ErrUnavailable, t.cfg.quarantine)
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	if t.witness != nil {
		// A Client that reached Redis within a watchdog timeout (plus the
		// quarantine) may still hold a lock there: its renewals record it.
		others, err := t.witness.OthersSawRedis(ctx, t.c.ID(), t.cfg.quarantine+t.c.cfg.Watchdog)
		if err != nil {
			return err
		}
		if others {
			return fmt.Errorf("%w: other clients still reach Redis; a fallback grant could overlap their holds (FallbackStrict)", ErrUnavailable)
		}
	}
	return nil
}

// redisWorked records a Redis grant: the outage, if any, is over, and the
// recovery window starts.
func (t *tiers) redisWorked(fctx context.Context) {
	if tok := TokenFrom(fctx); tok > t.maxToken.Load() {
		for {
			cur := t.maxToken.Load()
			if tok <= cur || t.maxToken.CompareAndSwap(cur, tok) {
				break
			}
		}
	}
	t.reachedRedis()
}

// reachedRedis records that Redis answered (a grant or a renewal): the
// outage, if any, is over and the recovery window starts; in strict mode the
// witness learns of it, at most once per renewal period.
func (t *tiers) reachedRedis() {
	now := time.Now()
	t.mu.Lock()
	if !t.downSince.IsZero() {
		t.downSince = time.Time{}
		t.recoveryUntil = now.Add(t.cfg.recovery)
	}
	witness := t.witness != nil && now.Sub(t.lastWitness) > t.c.cfg.Watchdog/3
	if witness {
		t.lastWitness = now
	}
	t.mu.Unlock()
	if witness {
		t.c.e.Detach(func(ctx context.Context) { _ = t.witness.SawRedis(ctx, t.c.ID()) })
	}
}

func (t *tiers) redisFailed() {
	t.mu.Lock()
	if t.downSince.IsZero() {
		t.downSince = time.Now()
	}
	t.mu.Unlock()
}

func (t *tiers) recovering() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return time.Now().Before(t.recoveryUntil)
}

// FallbackReason names the class of a Redis failure that made WithLock fall
// back, for metrics with few label values: "breaker_open", "refused",
// "reset", "timeout", "readonly", "loading", "masterdown", "clusterdown",
// "unavailable" or "other". Safe for concurrent use.
func FallbackReason(err error) string { return tier.Reason(err) }

// raiseRedisToken lifts name's Redis fencing counter to tok (best effort: a
// failure leaves later Redis tokens below tok, which the resource's fencing
// check then rejects rather than accepts).
func (t *tiers) raiseRedisToken(ctx context.Context, name string, tok uint64) {
	if err := kind.RaiseFence(ctx, t.c.e, name, tok); err != nil {
		t.c.cfg.Logger.Warn("dlock: could not lift the Redis fencing counter after the fallback", "name", name, "err", err)
	}
}
