package dlock

import (
	"context"
	"fmt"
	"time"
)

// LockOption configures WithLock.
type LockOption func(*lockConfig) error

type lockConfig struct {
	wait  time.Duration
	lease time.Duration
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
// It waits for the lock up to the wait time (default 10s) and returns
// ErrWaitTimeout if it did not get it. fn runs with a context that is
// cancelled, with cause ErrLockLost, if the hold is lost (and when the
// caller's ctx is). The lock is always released when fn returns, even if ctx
// is already cancelled then; WithLock returns fn's error untouched, or, when
// fn returned nil, the release's error (which wraps ErrLockLost if the hold
// was lost meanwhile). It is safe for concurrent use.
func (c *Client) WithLock(ctx context.Context, name string, fn func(context.Context) error, opts ...LockOption) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	cfg := lockConfig{wait: DefaultWaitTime}
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("%w: lock option %d is nil", ErrInvalidArgument, i)
		}
		if err := o(&cfg); err != nil {
			return err
		}
	}
	m := c.Mutex(name)
	ok, err := m.TryLock(ctx, cfg.wait, cfg.lease)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %q not acquired within %v", ErrWaitTimeout, name, cfg.wait)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m.onHoldEnd(func(cause error) {
		if cause != nil {
			cancel(cause)
		}
	})
	fnErr := fn(fctx)
	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.closeBudget)
	defer relCancel()
	relErr := m.Unlock(relCtx)
	if fnErr != nil {
		return fnErr
	}
	return relErr
}
