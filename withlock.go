package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/tier"
)

// LockOption configures WithLock (and RequestFor, and sqllock's WithLock).
// Options are plain function values: one may be reused for any number of
// calls, concurrently.
type LockOption func(*lockConfig) error

// lockConfig is what LockOptions set: the request a WithLock call makes.
type lockConfig struct{ FallbackRequest }

func (c *lockConfig) setKind(k Kind) error {
	if c.Kind != KindMutex && c.Kind != k {
		return fmt.Errorf("%w: lock options %s and %s exclude each other", ErrInvalidArgument, c.Kind, k)
	}
	c.Kind = k
	return nil
}

// Fair makes WithLock take a FairMutex: the lock is granted in arrival order
// across processes. Not with Read or Write.
func Fair() LockOption { return func(c *lockConfig) error { return c.setKind(KindFair) } }

// Read makes WithLock take the read side of the RWMutex name: fn runs
// alongside other readers, never alongside a writer. Not with Fair or Write.
func Read() LockOption { return func(c *lockConfig) error { return c.setKind(KindRead) } }

// Write makes WithLock take the write side of the RWMutex name: fn runs
// alone, and waiting writers hold new readers back. Not with Fair or Read.
// (Without Read or Write, WithLock takes a Mutex, which does not exclude
// RWMutex holders of the same name: use the same kind for one name.)
func Write() LockOption { return func(c *lockConfig) error { return c.setKind(KindWrite) } }

// MaxHold bounds a hold's life: d after the grant the watchdog stops
// renewing it and the holder is told (fn's context is cancelled with a
// loss wrapping ErrMaxHold) while Redis still holds the lock for at least
// two thirds of a watchdog timeout; unless released meanwhile, the lock
// then expires. It is for holders that are alive but stuck, which the
// watchdog would otherwise keep renewing for ever. It overrides the
// Client's WithMaxHold; d must be > 0. In a nested WithLock, which re-enters
// the outer call's hold, d bounds that one hold from the re-entry until the
// inner call returns: its end ends the outer call's hold too, and an inner
// call that returned in time leaves the outer one its own bound.
func MaxHold(d time.Duration) LockOption {
	return func(c *lockConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: MaxHold %v is not positive", ErrInvalidArgument, d)
		}
		c.MaxHold = d
		return nil
	}
}

// FallbackRequest is what WithLock asks of a Fallback tier, as WithLock's
// options set it (RequestFor reads them the same way). A FallbackRequest is
// a value; safe to copy and share.
type FallbackRequest struct {
	// Name is the lock's name.
	Name string
	// Kind is KindMutex, KindFair, KindRead or KindWrite.
	Kind Kind
	// Wait is how long to wait for the lock; 0: one attempt.
	Wait time.Duration
	// Lease is the hold's fixed lease; 0: renewed until released
	// (watchdog mode).
	Lease time.Duration
	// TokenFloor is a fencing token the grant's token must exceed, so
	// that the tiers' tokens form one increasing order; 0 when none.
	TokenFloor uint64
	// MaxHold bounds how long the hold may last (MaxHold); 0: the
	// Client's default (WithMaxHold).
	MaxHold time.Duration
}

// tierRequest and fallbackRequest convert a request between its public
// form and the tier's, which the engine's Kind types.
func tierRequest(r FallbackRequest) tier.Request {
	return tier.Request{Name: r.Name, Kind: lease.Kind(r.Kind), Wait: r.Wait, Lease: r.Lease, TokenFloor: r.TokenFloor, MaxHold: r.MaxHold}
}

func fallbackRequest(r tier.Request) FallbackRequest {
	return FallbackRequest{Name: r.Name, Kind: Kind(r.Kind), Wait: r.Wait, Lease: r.Lease, TokenFloor: r.TokenFloor, MaxHold: r.MaxHold}
}

// RequestFor returns the request WithLock makes for the lock name with opts:
// the options applied to WithLock's defaults (DefaultWaitTime, watchdog mode,
// KindMutex). It fails with an error wrapping ErrInvalidArgument for a nil,
// bad or conflicting option. A Fallback that also offers WithLock of its own
// uses it to read the same options. Safe for concurrent use.
func RequestFor(name string, opts ...LockOption) (FallbackRequest, error) {
	return resolve(name, opts)
}

func resolve(name string, opts []LockOption) (FallbackRequest, error) {
	cfg := lockConfig{FallbackRequest{Name: name, Wait: DefaultWaitTime, Kind: KindMutex}}
	for i, o := range opts {
		if o == nil {
			return FallbackRequest{}, fmt.Errorf("%w: lock option %d is nil", ErrInvalidArgument, i)
		}
		if err := o(&cfg); err != nil {
			return FallbackRequest{}, err
		}
	}
	return cfg.FallbackRequest, nil
}

// TokenFloor asks a Fallback tier to issue a fencing token above floor, so
// that its tokens follow the Redis tier's in one increasing order. dlock
// passes it to the Fallback with the highest Redis token it has seen; Redis
// grants ignore it (their counter already follows the server clock).
func TokenFloor(floor uint64) LockOption {
	return func(c *lockConfig) error {
		c.TokenFloor = max(c.TokenFloor, floor)
		return nil
	}
}

// DefaultWaitTime is how long WithLock waits for the lock unless WaitTime
// says otherwise.
const DefaultWaitTime = 10 * time.Second

// WaitTime sets how long WithLock waits for the lock: 0 makes one attempt.
// Default DefaultWaitTime. Negative values are invalid.
func WaitTime(d time.Duration) LockOption {
	return func(c *lockConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative wait time %v", ErrInvalidArgument, d)
		}
		c.Wait = d
		return nil
	}
}

// LeaseTime makes WithLock take the lock with a fixed lease, never renewed:
// fn's context is cancelled when the lease ends. Default 0: watchdog mode.
// Negative values are invalid.
func LeaseTime(d time.Duration) LockOption {
	return func(c *lockConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative lease time %v", ErrInvalidArgument, d)
		}
		if d > 0 && d < time.Millisecond {
			return fmt.Errorf("%w: lease %v is below Redis' 1ms resolution", ErrInvalidArgument, d)
		}
		c.Lease = d
		return nil
	}
}

// WithLock runs fn while holding the lock name, the everyday way to use dlock.
// It takes a Mutex unless an option (Fair, Read, Write) chooses another kind.
// It waits for the lock up to the wait time (default 10s) and returns an
// error wrapping ErrWaitTimeout if it did not get it, or ErrUnavailable if
// Redis did not answer within it.
//
// fn runs with a context that carries the hold: it is cancelled, with a cause
// wrapping ErrLockLost, if the hold is lost (and when ctx is done); lock calls
// on the same name with it re-enter, so WithLock nests; TokenFrom and
// GrantFrom read the hold's fencing token from it. The lock is always
// released when fn returns or panics, even if ctx is already done then (the
// release is detached, bounded by the cleanup timeout).
//
// WithLock returns fn's error untouched; when fn returned nil, it returns the
// release's error, which wraps ErrLockLost if the hold was lost meanwhile (if
// ctx is done before the release is confirmed, it returns the loss seen so
// far, or nil). It returns within moments of ctx being done, whatever Redis
// does. It is safe for concurrent use.
func (c *Client) WithLock(ctx context.Context, name string, fn func(context.Context) error, opts ...LockOption) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case fn == nil:
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	req, err := resolve(name, opts)
	if err != nil {
		return err
	}
	if c.fallback != nil {
		return c.fallback.WithLock(ctx, tierRequest(req), fn)
	}
	return c.withRedisLock(ctx, req, fn)
}

// withRedisLock is WithLock on Redis alone.
func (c *Client) withRedisLock(ctx context.Context, req FallbackRequest, fn func(context.Context) error) (err error) {
	var hd *lease.Handle
	switch req.Kind {
	case KindFair:
		hd = &c.FairMutex(req.Name).hd
	case KindRead:
		hd = &c.RWMutex(req.Name).r
	case KindWrite:
		hd = &c.RWMutex(req.Name).w
	default:
		hd = &c.Mutex(req.Name).hd
	}
	h, err := hd.Acquire(ctx, lease.Request{Wait: req.Wait, Lease: req.Lease, MaxHold: req.MaxHold})
	if err != nil {
		return err
	}
	if h == nil {
		return fmt.Errorf("%w: %q not acquired within %v", ErrWaitTimeout, req.Name, req.Wait)
	}
	fctx, cancel := h.Context(ctx)
	defer cancel()
	// Deferred, so that a panic in fn (which net/http, for one, recovers)
	// does not leave the lock held and renewed.
	defer func() {
		relErr := h.Release(ctx, false)
		if err != nil {
			return
		}
		if pending := (*lease.PendingRelease)(nil); errors.As(relErr, &pending) {
			relErr = h.Err() // the release goes on; report what is known
		}
		err = relErr
	}()
	return fn(fctx)
}
