package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/notify"
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

type attemptResult struct {
	status int64 // 1 held, 0 held by another, -1 our hold is gone
	count  int
	token  uint64
	pttl   time.Duration
}

func (m *Mutex) attempt(ctx context.Context, ttl time.Duration, expected int, entry string, registered bool) (attemptResult, error) {
	var flag any = "0"
	if registered {
		flag = "1"
	}
	a := &m.c.args
	ttlA := a.watchdogMs
	if ttl != m.c.cfg.watchdog {
		ttlA = ms(ttl)
	}
	var cmd *redis.Cmd
	switch m.side {
	case 'w':
		var waitA any = "0"
		if entry != "" {
			waitA = a.writerWaitMs
		}
		cmd = scriptRWLock.run(ctx, m.c.rdb, m.keyArgs, m.ownerA, m.fieldA, ttlA, expected, waitA, a.fenceTTLMs)
	case 'r':
		cmd = scriptRLock.run(ctx, m.c.rdb, m.keyArgs, m.fieldA, m.peer.fieldA, ttlA, expected, a.fenceTTLMs)
	default:
		var entryA any = ""
		if entry != "" {
			entryA = entry
		}
		cmd = scriptAcquire.run(ctx, m.c.rdb, m.keyArgs[:3],
			m.fieldA, ttlA, expected, entryA, flag, a.queueTTLMs, a.fenceTTLMs, m.fairA, a.claimMs)
	}
	r, err := readSmall(cmd)
	if err != nil {
		return attemptResult{}, err
	}
	v := r.v
	switch {
	case r.n == 3 && v[0] == 1:
		return attemptResult{status: 1, count: int(v[1]), token: uint64(v[2])}, nil
	case r.n == 2 && v[0] == 0:
		return attemptResult{status: 0, pttl: time.Duration(v[1]) * time.Millisecond}, nil
	case r.n == 1 && v[0] == -1:
		return attemptResult{status: -1}, nil
	case r.n == 1 && v[0] == -2:
		return attemptResult{}, ErrUpgrade
	}
	return attemptResult{}, fmt.Errorf("dlock: unexpected acquire reply %v", v[:r.n])
}

func (m *Mutex) acquire(ctx context.Context, wait, lease time.Duration, forever bool) (ok bool, err error) {
	start := time.Now()
	var finish func(Acquisition)
	if len(m.c.cfg.observers) > 0 {
		finish = m.c.observeAcquire(ctx, m.kind, m.name)
	}
	reentry := false
	timedOut := false
	defer func() {
		if finish != nil {
			finish(Acquisition{Kind: m.kind, Name: m.name, Acquired: ok, TimedOut: timedOut,
				Err: err, Waited: time.Since(start), Reentry: reentry})
		}
	}()
	if err := ctx.Err(); err != nil {
		return false, context.Cause(ctx)
	}
	if err := m.enter(ctx); err != nil {
		return false, err
	}
	defer m.exit()
	if m.c.closed.Load() {
		return false, ErrClosed
	}

	m.mu.Lock()
	count := m.count
	m.mu.Unlock()
	if count > 0 {
		reentry = true
		return m.reenter(ctx, count, lease)
	}
	if m.side == 'w' && m.peer.holdCount() > 0 {
		return false, ErrUpgrade
	}

	ttl := lease
	if lease <= 0 {
		ttl = m.c.cfg.watchdog
	}
	var deadline time.Time
	if !forever {
		deadline = start.Add(wait)
	}
	canWait := forever || wait > 0
	if m.c.cfg.spinMin > 0 {
		return m.spin(ctx, ttl, lease, deadline, canWait, &timedOut)
	}

	// When this client already listens for hand-offs, the first attempt also
	// queues the caller if the lock is taken: no second round trip.
	var w *notify.Waiter
	var entry string
	if canWait && m.c.hub.Ready() {
		if w, err = m.join(ctx); err != nil {
			return false, m.c.wrapClosed(err)
		}
		defer m.c.hub.Leave(w)
		entry = m.entry(w, ttl)
	}
	sent := time.Now()
	res, err := m.attempt(ctx, ttl, 0, entry, false)
	if err != nil {
		m.leaveQueue(ctx, entry)
		return false, err
	}
	if res.status == 1 {
		m.granted(res.token, sent, lease, 0)
		return true, nil
	}
	if !canWait {
		return false, nil
	}
	registered := entry != ""
	if w == nil {
		// Subscribe before the attempt that queues us, so that the hand-off
		// (or Redisson's release message) cannot be missed.
		if w, err = m.join(ctx); err != nil {
			return false, m.c.wrapClosed(err)
		}
		defer m.c.hub.Leave(w)
		entry = m.entry(w, ttl)
		sent = time.Now()
		if res, err = m.attempt(ctx, ttl, 0, entry, false); err != nil {
			m.leaveQueue(ctx, entry)
			return false, err
		}
		if res.status == 1 {
			m.granted(res.token, sent, lease, 0)
			return true, nil
		}
		registered = true
	}

	timer := time.NewTimer(m.sleep(res.pttl, deadline))
	defer timer.Stop()
	for {
		retry := false
		select {
		case <-w.C:
			ev := w.Take()
			switch {
			case ev.Granted:
				m.granted(ev.Token, time.Now(), lease, m.c.cfg.claim)
				return true, nil
			case ev.Closed:
				m.leaveQueue(ctx, entry)
				return false, ErrClosed
			case ev.Retry:
				retry = true
			}
		case <-timer.C:
			retry = true
		case <-ctx.Done():
			if ev := w.Take(); ev.Granted && ctx.Err() == nil {
				m.granted(ev.Token, time.Now(), lease, m.c.cfg.claim)
				return true, nil
			}
			m.leaveQueue(ctx, entry)
			return false, context.Cause(ctx)
		}
		if !retry {
			continue
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			// The wait is over; a hand-off that raced the deadline still counts.
			if ev := w.Take(); ev.Granted {
				m.granted(ev.Token, time.Now(), lease, m.c.cfg.claim)
				return true, nil
			}
			m.leaveQueue(ctx, entry)
			timedOut = true
			return false, nil
		}
		sent = time.Now()
		if res, err = m.attempt(ctx, ttl, 0, entry, registered); err != nil {
			m.leaveQueue(ctx, entry)
			return false, err
		}
		if res.status == 1 {
			// Taken by our own attempt, or a hand-off whose message we have
			// not read yet: either way the grant's TTL started after sent.
			tok := res.token
			if ev := w.Take(); ev.Granted {
				tok = ev.Token
			}
			var claim time.Duration
			if m.side == 0 {
				claim = m.c.cfg.claim // a read-write lock is never handed off
			}
			m.granted(tok, sent, lease, claim)
			return true, nil
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(m.sleep(res.pttl, deadline))
	}
}

// spin is acquire in spin mode: attempts separated by a jittered exponential
// backoff, with no subscription. A Mutex spins without queueing; a FairMutex
// queues an entry with ticket 0 (nobody listens for its hand-off message) and
// finds a hand-off by polling, so arrival order still holds.
func (m *Mutex) spin(ctx context.Context, ttl, lease time.Duration, deadline time.Time, canWait bool, timedOut *bool) (bool, error) {
	backoff := m.c.cfg.spinMin
	var timer *time.Timer
	var entry string
	switch {
	case m.fair && canWait:
		entry = "0 " + strconv.FormatInt(ms(ttl), 10) + " " + m.field
	case m.side == 'w' && canWait:
		entry = "w"
	}
	registered := false
	for {
		sent := time.Now()
		res, err := m.attempt(ctx, ttl, 0, entry, registered)
		if err != nil {
			m.leaveQueue(ctx, entry)
			return false, err
		}
		if res.status == 1 {
			var claim time.Duration
			if registered && m.fair {
				claim = m.c.cfg.claim // may be a hand-off, valid for the claim window
			}
			m.granted(res.token, sent, lease, claim)
			return true, nil
		}
		registered = entry != ""
		if !canWait {
			return false, nil
		}
		d := backoff/2 + rand.N(backoff/2+1)
		if res.pttl > 0 {
			d = min(d, res.pttl)
		}
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				m.leaveQueue(ctx, entry)
				*timedOut = true
				return false, nil
			}
			d = min(d, left)
		}
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			m.leaveQueue(ctx, entry)
			return false, context.Cause(ctx)
		}
		backoff = min(backoff*2, m.c.cfg.spinMax)
	}
}

// join registers the caller with the Client's pub/sub hub: readers as
// shared waiters, everyone else as exclusive ones.
func (m *Mutex) join(ctx context.Context) (*notify.Waiter, error) {
	if m.side == 'r' {
		return m.c.hub.JoinShared(ctx, m.channel)
	}
	return m.c.hub.Join(ctx, m.channel)
}

func (m *Mutex) holdCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count
}

// sleep is how long to wait before trying again on our own: until the
// holder's TTL ends, the wait ends, or the re-check interval passes
// (which bounds how long a crashed queued waiter can stall the lock).
func (m *Mutex) sleep(pttl time.Duration, deadline time.Time) time.Duration {
	d := m.c.cfg.recheck
	if pttl > 0 {
		d = min(d, pttl)
	}
	if !deadline.IsZero() {
		d = min(d, time.Until(deadline))
	}
	return max(d, time.Millisecond)
}

// entry is what a waiter registers with its attempts: a queue entry for a
// Mutex or FairMutex, "w" for a writer (registered as waiting, which holds
// new readers back), nothing for a reader.
func (m *Mutex) entry(w *notify.Waiter, ttl time.Duration) string {
	switch m.side {
	case 'w':
		return "w"
	case 'r':
		return ""
	}
	return strconv.FormatUint(w.Ticket, 10) + " " + strconv.FormatInt(ms(ttl), 10) + " " + m.field
}

// leaveQueue takes a giving-up waiter out of the queue, and passes the lock
// on if it was handed to us meanwhile. It runs even when ctx is cancelled,
// within a bounded time.
func (m *Mutex) leaveQueue(ctx context.Context, entry string) {
	if entry == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.c.cfg.closeBudget)
	defer cancel()
	a := &m.c.args
	var err error
	if m.side == 'w' {
		err = scriptRWLeave.run(ctx, m.c.rdb, m.keyArgs, m.ownerA).Err()
	} else {
		err = scriptLeave.run(ctx, m.c.rdb, m.keyArgs[:3], entry, m.fieldA, a.claimMs, a.fenceTTLMs).Err()
	}
	if err != nil {
		m.c.cfg.logger.Debug("dlock: leaving the wait queue failed; the entry expires", "name", m.name, "err", err)
	}
}

func (m *Mutex) reenter(ctx context.Context, count int, lease time.Duration) (bool, error) {
	ttl := lease
	if lease <= 0 {
		ttl = m.c.cfg.watchdog
	}
	res, err := m.attempt(ctx, ttl, count, "", false)
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if res.status != 1 {
		h := m.h
		m.count, m.h = 0, nil
		if h != nil {
			h.lose(fmt.Errorf("%w: re-entry found the lock gone", ErrLockLost))
			if err := h.lostErr(); err != nil {
				return false, err
			}
		}
		return false, ErrLockLost
	}
	m.count = res.count
	return true, nil
}

func (m *Mutex) granted(token uint64, sent time.Time, lease, claim time.Duration) {
	h := newHold(m, token, sent, lease, claim)
	m.mu.Lock()
	m.count, m.h = 1, h
	m.mu.Unlock()
}

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

func (m *Mutex) release(ctx context.Context, all bool) (err error) {
	if len(m.c.cfg.observers) > 0 {
		finish := m.c.observeRelease(ctx, m.kind, m.name)
		var final bool
		var held time.Duration
		defer func() {
			if !errors.Is(err, ErrNotHeld) {
				finish(Release{Kind: m.kind, Name: m.name, Final: final, Held: held, Err: err})
			}
		}()
		m.mu.Lock()
		if m.h != nil {
			final, held = m.count == 1 || all, time.Since(m.h.start)
		}
		m.mu.Unlock()
	}
	if m.c.closed.Load() && !all {
		return ErrClosed
	}
	m.mu.Lock()
	count, h := m.count, m.h
	m.mu.Unlock()
	if count == 0 || h == nil {
		return ErrNotHeld
	}
	final := count == 1 || all
	if final && h.entry != nil {
		m.c.renewer.Remove(h.entry) // no renewal may race the release
	}
	var allFlag any = "0"
	if all {
		allFlag = "1"
	}
	a := &m.c.args
	var cmd *redis.Cmd
	if m.side != 0 {
		cmd = scriptRWUnlock.run(ctx, m.c.rdb, m.keyArgs,
			m.fieldA, count, m.c.nextRequest(), a.latchTTLMs, allFlag, m.sideA)
	} else {
		cmd = scriptRelease.run(ctx, m.c.rdb, m.keyArgs,
			m.fieldA, count, m.c.nextRequest(), a.latchTTLMs, a.claimMs, a.fenceTTLMs, allFlag)
	}
	r, err := readSmall(cmd)
	if err == nil && (r.n == 0 || r.v[0] == 1 && r.n != 2) {
		err = fmt.Errorf("dlock: unexpected release reply %v", r.v[:r.n])
	}
	v := r.v
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err != nil && !final:
		return err
	case err != nil:
		m.count, m.h = 0, nil
		h.end(fmt.Errorf("%w: release failed: %w", ErrLockLost, err), nil)
		return err
	case v[0] == 0:
		m.count, m.h = 0, nil
		lostErr := h.lostErr()
		h.lose(fmt.Errorf("%w: not held at release", ErrLockLost))
		if lostErr == nil {
			lostErr = h.lostErr()
		}
		return lostErr
	}
	m.count = int(v[1])
	if m.count > 0 {
		return nil
	}
	m.h = nil
	lostErr := h.lostErr()
	h.end(nil, nil)
	return lostErr
}

// closeRelease is Close's release of a hold the client still has.
func (m *Mutex) closeRelease(ctx context.Context) error {
	if err := m.enter(ctx); err != nil {
		return err
	}
	defer m.exit()
	err := m.release(ctx, true)
	if errors.Is(err, ErrNotHeld) {
		return nil
	}
	return err
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
