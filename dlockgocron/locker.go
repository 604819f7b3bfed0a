package dlockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlock-dev/dlock"
)

// DefaultPrefix is the prefix a Locker puts before a job's key to name its
// lock unless WithPrefix says otherwise.
const DefaultPrefix = "gocron:"

// releaseTimeout bounds a release made in the background by HoldAtLeast.
const releaseTimeout = 10 * time.Second

var (
	// ErrHeldElsewhere is returned (wrapped, together with
	// dlock.ErrWaitTimeout) by Locker.Lock when the job's lock is held by
	// another instance, or by this one for an earlier fire still running or
	// still kept by HoldAtLeast: gocron then skips the fire.
	ErrHeldElsewhere = errors.New("dlockgocron: the job's lock is held")
	// ErrNotRunning is the cause of the context Locker.HoldContext returns
	// when the Locker holds no lock for the key.
	ErrNotRunning = errors.New("dlockgocron: no hold of the job's lock")
	// ErrReleased is the cause of a hold context ended by Unlock.
	ErrReleased = errors.New("dlockgocron: the job's lock was unlocked")
	// ErrLockerClosed is returned by Locker.Lock after Locker.Close.
	ErrLockerClosed = errors.New("dlockgocron: locker closed")
)

// Option configures a Locker (see NewLocker). Options are plain values, safe
// for concurrent use.
type Option func(*lockerConfig) error

type lockerConfig struct {
	prefix      string
	holdAtLeast time.Duration
	onLost      func(key string, err error)
}

// WithPrefix sets the prefix put before a job's key to make its lock name
// (default DefaultPrefix, "gocron:"). Every instance scheduling the same job
// must use the same prefix. The prefix must be valid UTF-8; an empty prefix
// uses the key as the lock name.
func WithPrefix(prefix string) Option {
	return func(c *lockerConfig) error {
		if !utf8.ValidString(prefix) {
			return fmt.Errorf("%w: prefix %q is not valid UTF-8", dlock.ErrInvalidArgument, prefix)
		}
		c.prefix = prefix
		return nil
	}
}

// HoldAtLeast makes Unlock keep the lock until at least d after it was
// taken: when the job returns sooner, the lock is released in the background
// once the remaining time has passed (Unlock itself returns at once, so the
// scheduler is never blocked). Instances whose clocks fire the same run a
// little later than the winner then find the lock still held and skip the
// fire, instead of running a fast job a second time. Pick d larger than the
// clock skew and firing jitter between instances and smaller than the job's
// interval, or the next fire is skipped too. d = 0 (the default) releases at
// once; d < 0 is invalid.
//
// The lock stays watchdog-renewed during the extra time; Locker.Close
// releases every lock still kept this way at once.
func HoldAtLeast(d time.Duration) Option {
	return func(c *lockerConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: HoldAtLeast(%v) is negative", dlock.ErrInvalidArgument, d)
		}
		c.holdAtLeast = d
		return nil
	}
}

// OnLost sets a function called once for every hold lost before it was
// released (the watchdog could not renew it in time, it was taken over or
// forced, Redis lost it, or the Client was closed), with the job's key and
// the loss, an error wrapping dlock.ErrLockLost (a *dlock.LossError). It is
// called from a goroutine of the Locker's, possibly concurrently for
// different keys; it must not block for long. Without it, losses are still
// visible to the job through HoldContext.
func OnLost(f func(key string, err error)) Option {
	return func(c *lockerConfig) error {
		if f == nil {
			return fmt.Errorf("%w: nil OnLost function", dlock.ErrInvalidArgument)
		}
		c.onLost = f
		return nil
	}
}

// Locker implements gocron.Locker with dlock mutexes: pass it to
// gocron.WithDistributedLocker (or gocron.WithDistributedJobLocker) on every
// instance, each with its own dlock Client on the same Redis.
//
// Lock takes the mutex named prefix+key in watchdog mode without waiting:
// when another instance (or an earlier fire on this one) holds it, Lock
// fails with ErrHeldElsewhere and gocron skips the fire. The watchdog renews
// the lock until Unlock; renewal never stops silently: a hold that is lost
// is reported to OnLost and cancels the job's HoldContext.
//
// A Locker is safe for concurrent use. Call Close when the schedulers that
// use it have been shut down, before closing the Client.
type Locker struct {
	c   *dlock.Client
	cfg lockerConfig

	mu      sync.Mutex
	closed  bool
	running map[string]*Lock // key -> the hold of the job now running
	stop    chan struct{}    // closed by Close: release kept locks at once
	// releases counts the releases HoldAtLeast keeps for later, which
	// Close waits for. A running job's watch is not counted: it ends with
	// the hold, at the job's Unlock or the Client's Close, and Close must
	// not wait for a job that the scheduler's shutdown gave up on.
	releases sync.WaitGroup
}

// NewLocker returns a Locker taking its locks through c. A nil c, a nil or
// failing option return an error wrapping dlock.ErrInvalidArgument.
func NewLocker(c *dlock.Client, opts ...Option) (*Locker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil dlock client", dlock.ErrInvalidArgument)
	}
	cfg := lockerConfig{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", dlock.ErrInvalidArgument)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Locker{
		c:       c,
		cfg:     cfg,
		running: map[string]*Lock{},
		stop:    make(chan struct{}),
	}, nil
}

// Lock implements gocron.Locker: it makes one attempt to take the lock of
// key (prefix+key) in watchdog mode and returns the hold, or an error that
// makes gocron skip the fire: one wrapping ErrHeldElsewhere and
// dlock.ErrWaitTimeout when the lock is held, dlock.ErrInvalidArgument for an
// empty or invalid key, dlock.ErrClosed, ErrLockerClosed, a Redis error, or
// ctx's cause. It returns as soon as ctx is done. Safe for concurrent use.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", dlock.ErrInvalidArgument)
	}
	if key == "" {
		return nil, fmt.Errorf("%w: empty job key", dlock.ErrInvalidArgument)
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, ErrLockerClosed
	}
	m := l.c.Mutex(l.cfg.prefix + key)
	if _, err := m.TryLockContext(ctx, 0, 0); err != nil {
		if errors.Is(err, dlock.ErrWaitTimeout) {
			return nil, fmt.Errorf("%w: %w", ErrHeldElsewhere, err)
		}
		return nil, err
	}
	hctx, cancel := context.WithCancelCause(context.Background())
	k := &Lock{l: l, key: key, m: m, taken: time.Now(), ctx: hctx, cancel: cancel}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		cancel(ErrLockerClosed)
		_ = m.Unlock(context.WithoutCancel(ctx))
		return nil, ErrLockerClosed
	}
	l.running[key] = k
	l.mu.Unlock()
	go k.watch()
	return k, nil
}

// HoldContext returns a context for the hold of key that this Locker has
// while the job runs: a job calls it with its own name (the key gocron
// passes, the job's name) to learn of a loss. The context is cancelled when
// the hold is lost (cause: a *dlock.LossError wrapping dlock.ErrLockLost)
// and when it is unlocked (cause ErrReleased). When the Locker holds no lock
// for key, the context is already cancelled with cause ErrNotRunning. Safe
// for concurrent use.
func (l *Locker) HoldContext(key string) context.Context {
	l.mu.Lock()
	k := l.running[key]
	l.mu.Unlock()
	if k == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(ErrNotRunning)
		return ctx
	}
	return k.ctx
}

// Close releases at once every lock that HoldAtLeast still keeps, waits for
// those releases, and makes later Lock calls fail with ErrLockerClosed.
// Holds of jobs still running are left to their Unlock (or to the Client's
// Close): Close does not wait for them. Call it after the schedulers using the Locker have
// been shut down. Idempotent; safe for concurrent use.
func (l *Locker) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.stop)
	}
	l.mu.Unlock()
	l.releases.Wait()
	return nil
}

// Lock is one hold of a job's lock, returned by Locker.Lock. Safe for
// concurrent use.
type Lock struct {
	l      *Locker
	key    string
	m      *dlock.Mutex
	taken  time.Time
	ctx    context.Context
	cancel context.CancelCauseFunc
	once   sync.Once
}

// watch reports a loss of the hold (before its release) and ends with the
// hold.
func (k *Lock) watch() {
	<-k.m.Done()
	if err := k.m.Err(); err != nil {
		k.cancel(err)
		if k.l.cfg.onLost != nil {
			k.l.cfg.onLost(k.key, err)
		}
	}
}

// Unlock implements gocron.Lock. Without HoldAtLeast (or once that time has
// passed) it releases the lock and returns the release's result: nil, an
// error wrapping dlock.ErrLockLost when the hold had been lost (the job may
// have overlapped another instance's run), or a Redis error; the release is
// sent even when ctx is done (detached, bounded by the Client's cleanup
// timeout). With time left to HoldAtLeast it returns nil at once, or the
// loss when the hold is already lost, and releases the lock in the
// background when the time is up (or at once on Close). Only the first call
// has an effect; later ones return dlock.ErrNotHeld. Safe for concurrent use.
func (k *Lock) Unlock(ctx context.Context) error {
	err := dlock.ErrNotHeld
	k.once.Do(func() { err = k.unlock(ctx) })
	return err
}

func (k *Lock) unlock(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	l := k.l
	l.mu.Lock()
	if l.running[k.key] == k {
		delete(l.running, k.key)
	}
	k.cancel(ErrReleased) // no effect after a loss: the loss stays the cause
	remaining := l.cfg.holdAtLeast - time.Since(k.taken)
	if remaining <= 0 || l.closed {
		l.mu.Unlock()
		return k.m.Unlock(ctx)
	}
	if err := k.m.Err(); err != nil {
		l.mu.Unlock()
		_ = k.m.Unlock(ctx) // frees the handle; returns the loss again
		return err
	}
	l.releases.Add(1)
	l.mu.Unlock()
	go k.releaseLater(context.WithoutCancel(ctx), remaining)
	return nil
}

// releaseLater releases the lock after d, at once when the Locker is closed
// or the hold ended (lost) meanwhile.
func (k *Lock) releaseLater(ctx context.Context, d time.Duration) {
	defer k.l.releases.Done()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-k.l.stop:
	case <-k.m.Done():
	}
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	_ = k.m.Unlock(ctx)
}

var (
	_ gocron.Locker  = (*Locker)(nil)
	_ gocron.Lock    = (*Lock)(nil)
	_ gocron.Elector = (*Elector)(nil)
)
