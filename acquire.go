package dlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/notify"
)

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
	if m.c.cfg.replicas > 0 {
		// Runs before exit (the gate is still ours) and before the observer.
		defer func() {
			if !ok || reentry {
				return
			}
			if cerr := m.confirmReplicas(ctx); cerr != nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.c.cfg.closeBudget)
				defer cancel()
				_ = m.release(rctx, true)
				ok, err = false, cerr
			}
		}()
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
		m.leaveAfterError(ctx, entry)
		return false, err
	}
	if res.status == 1 {
		return m.granted(res.token, sent, lease, 0)
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
			m.leaveAfterError(ctx, entry)
			return false, err
		}
		if res.status == 1 {
			return m.granted(res.token, sent, lease, 0)
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
				return m.granted(ev.Token, time.Now(), lease, ev.TTL)
			case ev.Closed:
				m.leaveQueue(ctx, entry)
				return false, ErrClosed
			case ev.Retry:
				retry = true
			}
		case <-timer.C:
			retry = true
		case <-ctx.Done():
			// A hand-off that raced the cancellation is passed on by leave.lua.
			m.leaveQueue(ctx, entry)
			return false, context.Cause(ctx)
		}
		if !retry {
			continue
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			// The wait is over; a hand-off that raced the deadline still counts.
			if ev := w.Take(); ev.Granted {
				return m.granted(ev.Token, time.Now(), lease, ev.TTL)
			}
			m.leaveQueue(ctx, entry)
			timedOut = true
			return false, nil
		}
		sent = time.Now()
		if res, err = m.attempt(ctx, ttl, 0, entry, registered); err != nil {
			m.leaveAfterError(ctx, entry)
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
			return m.granted(tok, sent, lease, claim)
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
			m.leaveAfterError(ctx, entry)
			return false, err
		}
		if res.status == 1 {
			var claim time.Duration
			if registered && m.fair {
				claim = m.c.cfg.claim // may be a hand-off, valid for the claim window
			}
			return m.granted(res.token, sent, lease, claim)
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
		if m.c.closed.Load() {
			m.leaveQueue(ctx, entry)
			return false, ErrClosed
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
	m.leave(ctx, entry)
}

// leaveAfterError is leaveQueue after an attempt that failed: the grant may
// have happened with its reply lost, so for a Mutex or FairMutex leave.lua
// runs even without an entry, to release a hold of this owner that nobody
// knows of.
func (m *Mutex) leaveAfterError(ctx context.Context, entry string) {
	if entry == "" && m.side != 0 {
		return
	}
	m.leave(ctx, entry)
}

func (m *Mutex) leave(ctx context.Context, entry string) {
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
	if m.h != nil {
		if lost := m.h.lostErr(); lost != nil {
			// The hold was declared lost here, though Redis may still have
			// it: re-entering would extend a hold that nothing renews.
			return false, lost
		}
	}
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

// granted records a grant on the handle and returns (true, nil), or, when
// the client was closed meanwhile (Close has already released what it
// knew of), releases the grant at once and returns ErrClosed.
func (m *Mutex) granted(token uint64, sent time.Time, lease, claim time.Duration) (bool, error) {
	h, tracked := newHold(m, token, sent, lease, claim)
	m.mu.Lock()
	m.count, m.h = 1, h
	m.mu.Unlock()
	if tracked {
		return true, nil
	}
	h.end(errClosedHold, nil)
	ctx, cancel := context.WithTimeout(context.Background(), m.c.cfg.closeBudget)
	defer cancel()
	_ = m.release(ctx, true)
	return false, ErrClosed
}
