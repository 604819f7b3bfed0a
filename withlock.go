package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// LockOption configures WithLock.
type LockOption func(*lockConfig) error

type lockConfig struct {
	wait       time.Duration
	lease      time.Duration
	kind       Kind   // KindMutex unless Fair, Read or Write
	tokenFloor uint64 // TokenFloor
	maxHold    time.Duration
}

func (c *lockConfig) setKind(k Kind) error {
	if c.kind != KindMutex && c.kind != k {
		return fmt.Errorf("%w: lock options %s and %s exclude each other", ErrInvalidArgument, c.kind, k)
	}
	c.kind = k
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
// Client's WithMaxHold; d must be > 0.
func MaxHold(d time.Duration) LockOption {
	return func(c *lockConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: MaxHold %v is not positive", ErrInvalidArgument, d)
		}
		c.maxHold = d
		return nil
	}
}

// LockSettings is what a list of LockOptions comes to: the wait, the lease
// and the lock kind WithLock uses. See ResolveLockOptions.
type LockSettings struct {
	Wait  time.Duration
	Lease time.Duration // 0: watchdog mode
	Kind  Kind          // KindMutex, KindFair, KindRead or KindWrite
	// TokenFloor is a fencing token the grant's token must exceed (see
	// TokenFloor); 0 when none was given.
	TokenFloor uint64
	// MaxHold bounds how long the hold may last (see MaxHold); 0: the
	// Client's default (WithMaxHold).
	MaxHold time.Duration
}

// ResolveLockOptions applies opts to WithLock's defaults (DefaultWaitTime,
// watchdog mode, KindMutex) and returns the result, or an error wrapping
// ErrInvalidArgument for a nil, bad or conflicting option. Fallback
// implementations use it to read the options WithLock was given. Safe for
// concurrent use.
func ResolveLockOptions(opts ...LockOption) (LockSettings, error) {
	cfg := lockConfig{wait: DefaultWaitTime, kind: KindMutex}
	for i, o := range opts {
		if o == nil {
			return LockSettings{}, fmt.Errorf("%w: lock option %d is nil", ErrInvalidArgument, i)
		}
		if err := o(&cfg); err != nil {
			return LockSettings{}, err
		}
	}
	return LockSettings{Wait: cfg.wait, Lease: cfg.lease, Kind: cfg.kind, TokenFloor: cfg.tokenFloor, MaxHold: cfg.maxHold}, nil
}

// TokenFloor asks a Fallback tier to issue a fencing token above floor, so
// that its tokens follow the Redis tier's in one increasing order. dlock
// passes it to the Fallback with the highest Redis token it has seen; Redis
// grants ignore it (their counter already follows the server clock).
func TokenFloor(floor uint64) LockOption {
	return func(c *lockConfig) error {
		c.tokenFloor = max(c.tokenFloor, floor)
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
		c.wait = d
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
		c.lease = d
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
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	set, err := ResolveLockOptions(opts...)
	if err != nil {
		return err
	}
	if c.fallback != nil {
		return c.fallback.withLock(ctx, name, fn, set, opts)
	}
	return c.withRedisLock(ctx, name, fn, set)
}

// withRedisLock is WithLock on Redis alone.
func (c *Client) withRedisLock(ctx context.Context, name string, fn func(context.Context) error, set LockSettings) (err error) {
	var hd handle
	switch set.Kind {
	case KindFair:
		hd.init(c, name, protoFair)
	case KindRead:
		hd.init(c, name, readProtocol{})
	case KindWrite:
		hd.init(c, name, writeProtocol{})
	default:
		hd.init(c, name, protoMutex)
	}
	h, err := hd.lock(ctx, lockRequest{wait: set.Wait, lease: set.Lease, maxHold: set.MaxHold})
	if err != nil {
		return err
	}
	if h == nil {
		return fmt.Errorf("%w: %q not acquired within %v", ErrWaitTimeout, name, set.Wait)
	}
	fctx, cancel := h.context(ctx)
	defer cancel()
	// Deferred, so that a panic in fn (which net/http, for one, recovers)
	// does not leave the lock held and renewed.
	defer func() {
		relErr := c.releaseDetached(ctx, h, false)
		if err != nil {
			return
		}
		if pending := (*pendingRelease)(nil); errors.As(relErr, &pending) {
			relErr = h.lostErr() // the release goes on; report what is known
		}
		err = relErr
	}()
	return fn(fctx)
}
