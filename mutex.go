package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// Mutex is a handle on a reentrant distributed lock, Redisson's RLock. The
// handle is the owner: Lock on a handle that holds the lock re-enters and
// counts, Unlock counts down and releases at zero, and another handle (in
// this process or any other) is another owner.
//
// A Mutex is safe for concurrent use. Its lock operations are serialized:
// while one goroutine waits in Lock, another goroutine's Lock on the same
// handle waits behind it and then re-enters. Goroutines that must exclude
// each other need handles of their own.
//
// Redis layout (Redisson's): the key is the name, a hash whose field
// "<client id>:<owner id>" holds the hold count, with a TTL; a release
// publishes "0" on "redisson_lock__channel:{name}" when nobody is queued.
// dlock adds dlock:fence:{name} (the fencing counter, restarted from the
// server clock every 24h), dlock:queue:{name} (processes waiting for a direct
// hand-off, with a TTL) and dlock:latch:{name} (the last final release's
// request id, for 30s).
type Mutex struct {
	c       *Client
	name    string
	kind    Kind
	ks      keys.Set
	keyArgs []any // ks.Lock, ks.Fence, ks.Queue, ks.Latch, boxed once
	field   string
	fieldA  any // field, boxed once
	nameErr error
	gate    chan struct{} // serializes lock operations on the handle
	fair    bool          // FairMutex: a free lock goes to the queue's head
	fairA   any           // "1" when fair, boxed once

	// A side of an RWMutex: 'r' or 'w' (0 for Mutex and FairMutex). The two
	// sides of one RWMutex share the owner, the gate and the keys.
	side       byte
	sideA      any    // "r" or "w", boxed once
	ownerA     any    // the owner "<client id>:<owner id>", boxed once
	peer       *Mutex // the other side of the RWMutex
	channel    string // the release channel waiters subscribe to
	renewField string // renew.Entry.Field for this handle's holds

	mu    sync.Mutex
	count int
	h     *hold
}

func newMutex(c *Client, name string) *Mutex {
	m := &Mutex{}
	m.init(c, name, KindMutex)
	return m
}

// init sets up a handle in place (FairMutex embeds a Mutex; RWMutex has two).
func (m *Mutex) init(c *Client, name string, kind Kind) {
	m.c, m.name, m.kind, m.gate = c, name, kind, make(chan struct{}, 1)
	m.fair = kind == KindFair
	m.fairA = "0"
	if m.fair {
		m.fairA = "1"
	}
	if err := keys.Validate(name); err != nil {
		m.nameErr = fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		return
	}
	m.ks = keys.For(name)
	m.keyArgs = []any{m.ks.Lock, m.ks.Fence, m.ks.Queue, m.ks.Latch}
	m.field = c.id + ":" + strconv.FormatUint(c.owners.Add(1), 10)
	m.fieldA = m.field
	m.channel = m.ks.Channel
	m.renewField = m.field
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Owner returns the handle's owner field, "<client id>:<owner id>".
func (m *Mutex) Owner() string { return m.field }

// TryLock tries to acquire the lock, waiting up to wait for it. wait <= 0
// makes exactly one attempt. lease > 0 makes the lock expire lease after the
// grant, never renewed; lease <= 0 selects watchdog mode: the lock's TTL is
// the watchdog timeout, renewed every third of it until Unlock.
//
// It returns (true, nil) once held (or re-entered), (false, nil) when the
// wait ran out, and an error for a failure: ErrInvalidArgument, ErrClosed,
// a Redis error, or ctx's error (errors.Is(err, context.Canceled) holds when
// ctx was cancelled). A re-entry never waits and keeps the hold's mode.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if err := m.check(ctx, lease); err != nil {
		return false, err
	}
	return m.acquire(ctx, wait, lease, false)
}

// Lock acquires the lock in watchdog mode, waiting as long as it takes or
// until ctx is done, in which case it returns ctx's error.
func (m *Mutex) Lock(ctx context.Context) error {
	if err := m.check(ctx, 0); err != nil {
		return err
	}
	_, err := m.acquire(ctx, 0, 0, true)
	return err
}

func (m *Mutex) check(ctx context.Context, lease time.Duration) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case m.nameErr != nil:
		return m.nameErr
	case lease > 0 && lease < time.Millisecond:
		return fmt.Errorf("%w: lease %v is below Redis' 1ms resolution", ErrInvalidArgument, lease)
	case m.c.closed.Load():
		return ErrClosed
	}
	return nil
}

func (m *Mutex) enter(ctx context.Context) error {
	select {
	case m.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (m *Mutex) exit() { <-m.gate }

// Unlock releases one hold of the lock; the lock is free (or handed to the
// next waiter) when the count reaches zero. It returns ErrNotHeld when the
// handle holds nothing, and an error wrapping ErrLockLost when the hold had
// been lost (the protected work may have overlapped another holder's). On any
// error from the final release the handle holds nothing afterwards: the lock
// expires by its TTL at the latest.
func (m *Mutex) Unlock(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if m.nameErr != nil {
		return m.nameErr
	}
	// Unlock waits for the handle's other operations whatever ctx says: the
	// release itself still honours ctx.
	m.gate <- struct{}{}
	defer m.exit()
	return m.release(ctx, false)
}

// ForceUnlock releases the lock whoever holds it, handing it to the next
// queued waiter or waking Redisson-style waiters, and reports whether it was
// held. Holders learn of it when their next renewal fails.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.check(ctx, 0); err != nil {
		return false, err
	}
	a := &m.c.args
	n, err := scriptForce.run(ctx, m.c.rdb, m.keyArgs[:3], a.claimMs, a.fenceTTLMs).Int64()
	return n == 1, err
}

// IsLocked reports whether any owner holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if err := m.check(ctx, 0); err != nil {
		return false, err
	}
	n, err := m.c.rdb.Exists(ctx, m.ks.Lock).Result()
	return n == 1, err
}

// HoldCount returns this handle's hold count as Redis has it (0 when it does
// not hold the lock).
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	if err := m.check(ctx, 0); err != nil {
		return 0, err
	}
	n, err := m.c.rdb.HGet(ctx, m.ks.Lock, m.field).Int()
	if errors.Is(err, redisNil) {
		return 0, nil
	}
	return n, err
}

// RemainingTTL returns the lock's remaining time to live, whoever holds it:
// 0 when it is not held.
func (m *Mutex) RemainingTTL(ctx context.Context) (time.Duration, error) {
	if err := m.check(ctx, 0); err != nil {
		return 0, err
	}
	d, err := m.c.rdb.PTTL(ctx, m.ks.Lock).Result()
	if err != nil || d < 0 {
		return 0, err
	}
	return d, nil
}

// Token returns the fencing token of the current hold, or 0 when the handle
// holds nothing. Tokens of successive holds of one name strictly increase;
// pass the token to the resource you protect and have it reject writes that
// carry a token lower than one it has seen.
func (m *Mutex) Token() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.h == nil {
		return 0
	}
	return m.h.token
}

// Done returns a channel that is closed when the current hold ends: by the
// final Unlock, or by its loss (see Err). When the handle holds nothing it
// returns a closed channel.
func (m *Mutex) Done() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.h == nil {
		return closedCh
	}
	return m.h.done
}

// Err returns the reason the current hold was lost, wrapping ErrLockLost, or
// nil while it is held and when the handle holds nothing.
func (m *Mutex) Err() error {
	m.mu.Lock()
	h := m.h
	m.mu.Unlock()
	if h == nil {
		return nil
	}
	return h.lostErr()
}

// onHoldEnd runs f when the current hold ends; it reports false when the
// handle holds nothing.
func (m *Mutex) onHoldEnd(f func(error)) bool {
	m.mu.Lock()
	h := m.h
	m.mu.Unlock()
	if h == nil {
		return false
	}
	h.onEnded(f)
	return true
}
