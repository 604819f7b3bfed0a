package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// Request is what dlock's WithLock asks of a tier (dlock.FallbackRequest):
// the lock, its kind, how long to wait, the lease, the token floor and the
// hold's bound. A Request is a value; safe to copy and share.
type Request struct {
	Name  string
	Kind  lease.Kind    // KindMutex, KindFair, KindRead or KindWrite
	Wait  time.Duration // how long to wait for the lock; 0: one attempt
	Lease time.Duration // 0: renewed until released (watchdog mode)
	// TokenFloor is a fencing token the grant's token must exceed, so that
	// the tiers' tokens form one increasing order; 0 when none.
	TokenFloor uint64
	// MaxHold bounds how long the hold may last (dlock.MaxHold); 0: the
	// Client's default (dlock.WithMaxHold).
	MaxHold time.Duration
}

// Fallback is dlock.Fallback.
type Fallback interface {
	Backend() string
	Run(ctx context.Context, req Request, fn func(context.Context) error) error
}

// Breaker is dlock.Breaker.
type Breaker interface {
	Allow() (done func(err error), err error)
}

// Witness is dlock.RedisWitness.
type Witness interface {
	SawRedis(ctx context.Context, client string) error
	OthersSawRedis(ctx context.Context, client string, d time.Duration) (bool, error)
}

// Config is what Tiers are built with.
type Config struct {
	Fallback   Fallback
	Breaker    Breaker       // nil: the default breaker
	Witness    Witness       // nil unless strict
	Quarantine time.Duration // 0: the watchdog timeout plus its drift margin
	Recovery   time.Duration // 0: twice the quarantine, at least 10s
	ClientID   string
	Watchdog   time.Duration
	// Redis takes the lock in Redis and runs fn (the Client's own WithLock).
	Redis func(ctx context.Context, req Request, fn func(context.Context) error) error
	// Raise lifts name's Redis fencing counter to at least tok.
	Raise     func(ctx context.Context, name string, tok uint64) error
	Detach    func(func(context.Context))
	Logger    *slog.Logger
	Observers []lease.Observer
}

// Tiers is a Client's fallback state: the breaker in front of Redis, the
// outage's quarantine, the recovery window after it and the fallback calls
// in progress. Safe for concurrent use.
type Tiers struct {
	cfg Config

	maxToken atomic.Uint64 // the highest Redis token this Client saw

	// ownBreaker: cfg.Breaker is the default breaker, which knows
	// errAbandoned. refused: the breaker refused a call since it was last
	// told of a success, so that the next call it lets through may be its
	// half-open probe (abandoned).
	ownBreaker bool
	refused    atomic.Bool

	mu sync.Mutex
	// downSince is when the outage began: the first infrastructure failure,
	// or the first call sent to the fallback, since Redis last answered;
	// zero while Redis answers.
	downSince     time.Time
	reached       uint64    // how many times Redis answered (ReachedRedis)
	recoveryUntil time.Time // Redis grants also take the fallback lock until then
	lastWitness   time.Time
	// fallbacks counts the fallback calls of each name in progress (waiting
	// for the fallback lock or holding it): Redis grants of the name take
	// the fallback lock too while there are any.
	fallbacks map[string]int
	// owed holds, for each name, the highest fallback token that fn ran
	// with (a fallback grant, or a Redis grant during recovery) and whose
	// lift of the name's Redis fencing counter has not succeeded yet. While it does,
	// Redis grants of the name keep taking the fallback lock (whose tokens
	// are above it) and lifting again: a Redis grant alone would hand out a
	// token below it.
	owed map[string]uint64
}

// worked wraps a call's done so that a success sent to the breaker also
// records that it no longer refused since (see abandoned).
func (t *Tiers) worked(done func(error)) func(error) {
	return func(err error) {
		if err == nil {
			t.refused.Store(false)
		}
		done(err)
	}
}

// abandoned tells the breaker of a call whose caller's ctx ended before
// Redis answered (or before fn started). It proves nothing about Redis:
// reported as a success it would close a half-open breaker whose probe it
// was, untested. The default breaker is told so (errAbandoned) and stays
// half-open for the next caller's probe. A Breaker of the caller's own
// cannot be asked whether the call was its probe; it may have been if the
// breaker refused a call since it was last told of a success, and then
// done gets an error wrapping the ctx's (context.Canceled or
// DeadlineExceeded, which gobreaker's IsExcluded can leave uncounted; else
// the breaker opens again). Otherwise done gets nil, as for contention, so
// that callers giving up never open a closed breaker.
func (t *Tiers) abandoned(ctx context.Context, done func(error)) {
	if t.ownBreaker || t.refused.Load() {
		done(fmt.Errorf("%w: %w", errAbandoned, ctx.Err()))
		return
	}
	done(nil)
}

// New returns the tiers of cfg, filling in its defaults.
func New(cfg Config) *Tiers {
	if cfg.Breaker == nil {
		cfg.Breaker = NewBreaker(5, 5*time.Second, func(state string) {
			cfg.Logger.Warn("dlock: circuit breaker", "state", state)
			for _, o := range cfg.Observers {
				o.BreakerChanged(state)
			}
		})
	}
	if cfg.Quarantine == 0 {
		cfg.Quarantine = cfg.Watchdog + lease.DriftMargin(cfg.Watchdog)
	}
	if cfg.Recovery == 0 {
		cfg.Recovery = max(2*cfg.Quarantine, 10*time.Second)
	}
	_, own := cfg.Breaker.(*breaker)
	return &Tiers{cfg: cfg, ownBreaker: own, fallbacks: map[string]int{}, owed: map[string]uint64{}}
}

// WithLock is dlock's WithLock with a fallback tier.
func (t *Tiers) WithLock(ctx context.Context, req Request, fn func(context.Context) error) error {
	start := time.Now()
	var reason error
	done, err := t.cfg.Breaker.Allow()
	if err != nil {
		t.refused.Store(true)
		reason = fmt.Errorf("%w: %w: %w", lease.ErrUnavailable, ErrOpenBreaker, err)
	} else {
		started, err := t.onRedis(ctx, req, start, t.worked(done), fn)
		switch {
		case started:
			return err
		case ctx.Err() != nil:
			t.abandoned(ctx, done)
			return err
		case !IsInfrastructure(err):
			t.worked(done)(nil) // contention is not Redis' fault
			return err
		}
		done(err)
		reason = err
		t.RedisFailed()
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := t.mayFallBack(ctx, start.Add(req.Wait)); err != nil {
		return errors.Join(reason, err)
	}
	t.observeFallback(req.Kind, req.Name, reason)
	return t.onFallback(ctx, req, start, fn)
}

// onRedis runs fn under the Redis lock; started reports whether fn ran.
// While Redis recovers from an outage, or a fallback call of the name is in
// progress, fn also takes the fallback lock: fallback holders may still be
// inside fn.
func (t *Tiers) onRedis(ctx context.Context, req Request, start time.Time, done func(error), fn func(context.Context) error) (started bool, err error) {
	err = t.cfg.Redis(ctx, req, func(fctx context.Context) error {
		started = true
		done(nil)
		t.redisWorked(fctx)
		if !t.recovering(req.Name) {
			return fn(fctx)
		}
		// Take the fallback lock too, above our token, and lift the Redis
		// counter to the token the fallback issued, so that the name's
		// later Redis tokens stay above it.
		sreq := req
		sreq.Wait = max(req.Wait-time.Since(start), 0)
		sreq.TokenFloor = max(req.TokenFloor, tokenFrom(fctx))
		err := t.cfg.Fallback.Run(fctx, sreq, func(sctx context.Context) error {
			tok := tokenFrom(sctx)
			t.raiseRedisToken(sctx, req.Name, tok)
			return fn(lease.ContextWithHeldGrant(sctx, lease.Grant{Name: req.Name, Token: tok, Backend: lease.BackendRedis}))
		})
		if err != nil && fctx.Err() != nil && ctx.Err() == nil && !errors.Is(err, lease.ErrLockLost) {
			err = context.Cause(fctx) // the Redis hold was lost while waiting
		}
		return err
	})
	return started, err
}

// onFallback runs fn under the fallback tier's lock, reporting the
// acquisition to the observers. The call counts as in progress until the
// fallback lock is released, however long fn runs.
func (t *Tiers) onFallback(ctx context.Context, req Request, start time.Time, fn func(context.Context) error) error {
	t.fallbackCall(req.Name, 1)
	defer t.fallbackCall(req.Name, -1)
	freq := req
	freq.Wait = max(req.Wait-time.Since(start), 0)
	freq.TokenFloor = max(req.TokenFloor, t.maxToken.Load())
	finish := lease.ObserveAcquire(t.cfg.Observers, ctx, req.Kind, req.Name)
	granted := false
	err := t.cfg.Fallback.Run(ctx, freq, func(fctx context.Context) error {
		granted = true
		if tok := tokenFrom(fctx); tok > 0 {
			// The name's Redis counter is below this token (it counts on
			// from long ago): the name's next Redis grant, however late,
			// takes the fallback lock too and lifts it (recovering).
			t.mu.Lock()
			t.owed[req.Name] = max(t.owed[req.Name], tok)
			t.mu.Unlock()
		}
		if finish != nil {
			finish(lease.Acquisition{Kind: req.Kind, Name: req.Name, Acquired: true, Waited: time.Since(start), Backend: t.cfg.Fallback.Backend(), Weight: 1})
		}
		return fn(fctx)
	})
	if !granted && finish != nil {
		a := lease.Acquisition{Kind: req.Kind, Name: req.Name, Err: err, Waited: time.Since(start), Backend: t.cfg.Fallback.Backend(), Weight: 1}
		if errors.Is(err, lease.ErrWaitTimeout) {
			a.TimedOut, a.Err = true, nil
		}
		finish(a)
	}
	return err
}

// mayFallBack waits out the quarantine (until every Redis holder has been
// told of its loss), within the wait, and in strict mode checks that no
// other Client still reaches Redis. The quarantine runs from the outage's
// start, which is never before Redis last answered: when Redis answered
// after its last failure (a holder renewed, and the breaker is still open),
// the outage starts now. Redis answering during the wait ends the outage: a
// holder renewed, and may hold the name on, so the fallback is refused.
func (t *Tiers) mayFallBack(ctx context.Context, deadline time.Time) error {
	t.mu.Lock()
	if t.downSince.IsZero() {
		t.downSince = time.Now()
	}
	ready, reached := t.downSince.Add(t.cfg.Quarantine), t.reached
	t.mu.Unlock()
	if d := time.Until(ready); d > 0 {
		if ready.After(deadline) {
			return fmt.Errorf("%w: the fallback opens %v after Redis failed (quarantine), later than the wait allows", lease.ErrUnavailable, t.cfg.Quarantine)
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	t.mu.Lock()
	answered := t.reached != reached
	t.mu.Unlock()
	if answered {
		return fmt.Errorf("%w: Redis answered again during the fallback's quarantine; a Redis holder may still hold the lock", lease.ErrUnavailable)
	}
	if t.cfg.Witness != nil {
		// A Client that reached Redis within a watchdog timeout (plus the
		// quarantine) may still hold a lock there: its renewals record it.
		others, err := t.cfg.Witness.OthersSawRedis(ctx, t.cfg.ClientID, t.cfg.Quarantine+t.cfg.Watchdog)
		if err != nil {
			return err
		}
		if others {
			return fmt.Errorf("%w: other clients still reach Redis; a fallback grant could overlap their holds (FallbackStrict)", lease.ErrUnavailable)
		}
	}
	return nil
}

// redisWorked records a Redis grant: the outage, if any, is over, and the
// recovery window starts.
func (t *Tiers) redisWorked(fctx context.Context) {
	if tok := tokenFrom(fctx); tok > t.maxToken.Load() {
		for {
			cur := t.maxToken.Load()
			if tok <= cur || t.maxToken.CompareAndSwap(cur, tok) {
				break
			}
		}
	}
	t.ReachedRedis()
}

// ReachedRedis records that Redis answered (a grant or a renewal): the
// outage, if any, is over and the recovery window starts; in strict mode the
// witness learns of it, at most once per renewal period.
func (t *Tiers) ReachedRedis() {
	now := time.Now()
	t.mu.Lock()
	t.reached++
	if !t.downSince.IsZero() {
		t.downSince = time.Time{}
		t.recoveryUntil = now.Add(t.cfg.Recovery)
	}
	witness := t.cfg.Witness != nil && now.Sub(t.lastWitness) > t.cfg.Watchdog/3
	if witness {
		t.lastWitness = now
	}
	t.mu.Unlock()
	if witness {
		t.cfg.Detach(func(ctx context.Context) { _ = t.cfg.Witness.SawRedis(ctx, t.cfg.ClientID) })
	}
}

// RedisFailed records an infrastructure failure of Redis (a renewal's).
func (t *Tiers) RedisFailed() {
	t.mu.Lock()
	if t.downSince.IsZero() {
		t.downSince = time.Now()
	}
	t.mu.Unlock()
}

// recovering reports whether a Redis grant of name must also take the
// fallback lock: during the recovery window, which covers other Clients'
// fallback holders, while a fallback call of name in this Client is in
// progress, which may outlast the window, and while a lift of name's Redis
// counter past a fallback token is owed (raiseRedisToken).
func (t *Tiers) recovering(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fallbacks[name] > 0 || t.owed[name] > 0 || time.Now().Before(t.recoveryUntil)
}

// fallbackCall adds delta to the fallback calls of name in progress.
func (t *Tiers) fallbackCall(name string, delta int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.fallbacks[name] + delta; n > 0 {
		t.fallbacks[name] = n
	} else {
		delete(t.fallbacks, name)
	}
}

// raiseRedisToken lifts name's Redis fencing counter to tok, the fallback
// token a Redis grant runs fn with. Until a lift succeeds the lift is owed:
// a failed one (Redis failing again, ctx cancelled) would otherwise let
// later Redis grants hand out tokens below tok, which a fencing resource
// rejects though their holders are legitimate. So while it is owed, Redis
// grants of name keep taking the fallback lock, whose tokens are above tok,
// and lift again (recovering). The lift is retried by the name's next
// grant, not in the background: that is when the order matters, and a
// background loop would outlive its cause.
func (t *Tiers) raiseRedisToken(ctx context.Context, name string, tok uint64) {
	if tok == 0 {
		return // a fallback without tokens: nothing to order
	}
	t.mu.Lock()
	t.owed[name] = max(t.owed[name], tok)
	t.mu.Unlock()
	if err := t.cfg.Raise(ctx, name, tok); err != nil {
		t.cfg.Logger.Warn("dlock: could not lift the Redis fencing counter after the fallback; Redis grants of the name keep taking the fallback lock until a lift succeeds",
			"name", name, "token", tok, "err", err)
		return
	}
	t.mu.Lock()
	if t.owed[name] <= tok {
		delete(t.owed, name)
	}
	t.mu.Unlock()
}

func (t *Tiers) observeFallback(kind lease.Kind, name string, reason error) {
	t.cfg.Logger.Warn("dlock: falling back", "name", name, "backend", t.cfg.Fallback.Backend(), "reason", reason)
	for _, o := range t.cfg.Observers {
		o.FellBack(kind, name, t.cfg.Fallback.Backend(), reason)
	}
}

func tokenFrom(ctx context.Context) uint64 {
	g, _ := lease.GrantFrom(ctx)
	return g.Token
}
