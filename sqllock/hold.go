package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// Hold is one granted lock, returned by Locker.Acquire. It pins one SQL
// session until Release, loss, or the Locker's Close; a goroutine checks
// that session every CheckInterval.
//
// All methods are safe for concurrent use.
type Hold struct {
	l      *Locker
	name   string
	kind   dlock.Kind
	shared bool
	key    any
	token  uint64
	lease  time.Duration
	conn   *sql.Conn
	sess   session

	relOnce sync.Once
	relReq  chan struct{} // closed by the first Release
	exited  chan struct{} // closed once the keeper is done with the session
	relErr  error         // the release's outcome; read after exited

	done  chan struct{} // closed when the hold ends
	mu    sync.Mutex
	ended bool
	lost  error
	onEnd []func(error)
	// calls counts the WithLock calls inside a hold that WithLock took:
	// the one that took it and its re-entries. The last to leave releases
	// it; at 0 no call may re-enter (it is being, or was, released).
	calls int
}

// enter counts one more WithLock call inside the hold; false when none is
// left inside (the hold is being or was released) or it ended.
func (h *Hold) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == 0 || h.ended {
		return false
	}
	h.calls++
	return true
}

// leave counts a WithLock call out of the hold; it reports whether it was
// the last one, which must release the hold.
func (h *Hold) leave() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls--
	return h.calls == 0
}

// Name returns the lock name. Safe for concurrent use.
func (h *Hold) Name() string { return h.name }

// Kind returns the kind the hold was asked for (dlock.KindMutex when the
// settings named none). Safe for concurrent use.
func (h *Hold) Kind() dlock.Kind { return h.kind }

// Token returns the hold's fencing token: greater than every earlier token
// of the name in this database, than the database clock in microseconds
// when it was granted, and than the floor given to Acquire. Safe for
// concurrent use.
func (h *Hold) Token() uint64 { return h.token }

// Grant returns the hold as a dlock.Grant (name, token, and the Locker's
// Backend), for dlock.ContextWithGrant. Safe for concurrent use.
func (h *Hold) Grant() dlock.Grant {
	return dlock.Grant{Name: h.name, Token: h.token, Backend: h.l.d.backend()}
}

// Done returns a channel that is closed when the hold ends: after Release
// released the lock, or as soon as the hold is lost (see Err). Safe for
// concurrent use.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Err returns why the hold was lost, wrapping dlock.ErrLockLost: its
// session was killed, its connection died or stopped answering, the lease
// ran out, or the Locker was closed (then it wraps dlock.ErrClosed too).
// It returns nil while the hold lasts and after a plain Release. Safe for
// concurrent use.
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// Release releases the lock on the session that took it and returns the
// session to the pool. It returns nil when the lock was released, an error
// wrapping dlock.ErrLockLost when the hold had been lost before (the lock
// is free then: its session is gone), and an error wrapping
// dlock.ErrNotHeld on every call after the first. The release does not
// depend on ctx: when ctx ends first, Release returns ctx's error at once
// and the release finishes in the background within OpTimeout (if the
// statement fails, the session is closed, which releases the lock). Safe
// for concurrent use.
func (h *Hold) Release(ctx context.Context) error {
	first := false
	h.relOnce.Do(func() {
		first = true
		close(h.relReq)
	})
	if !first {
		return fmt.Errorf("sqllock: release %q: %w: already released", h.name, dlock.ErrNotHeld)
	}
	select {
	case <-h.exited:
	case <-ctx.Done():
		return fmt.Errorf("sqllock: release %q goes on in the background: %w", h.name, context.Cause(ctx))
	}
	if lost := h.Err(); lost != nil {
		return lost
	}
	return h.relErr
}

// onHoldEnd runs f (in the keeper's goroutine, or at once if the hold has
// ended) with the loss cause, or nil after a Release.
func (h *Hold) onHoldEnd(f func(error)) {
	h.mu.Lock()
	if h.ended {
		lost := h.lost
		h.mu.Unlock()
		f(lost)
		return
	}
	h.onEnd = append(h.onEnd, f)
	h.mu.Unlock()
}

// end marks the hold ended with cause (nil: released) and tells the
// watchers; only the first call counts.
func (h *Hold) end(cause error) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended, h.lost = true, cause
	fns := h.onEnd
	h.onEnd = nil
	close(h.done)
	h.mu.Unlock()
	for _, f := range fns {
		f(cause)
	}
}

// keep owns the pinned session from the grant to the end of the hold: it
// checks it every CheckInterval and releases it on Release, lease end or
// Close. Only this goroutine uses h.conn, so statements never overlap.
func (h *Hold) keep() {
	l := h.l
	defer l.bg.Done()
	defer close(h.exited)
	tick := time.NewTicker(l.cfg.checkInterval)
	defer tick.Stop()
	var leaseEnd <-chan time.Time
	if h.lease > 0 {
		t := time.NewTimer(h.lease)
		defer t.Stop()
		leaseEnd = t.C
	}
	for {
		select {
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.opTimeout)
			held, err := l.d.check(ctx, h.conn, h.key)
			cancel()
			if err == nil && held {
				continue
			}
			cause := fmt.Errorf("%w: sqllock: the %s session holding %q no longer holds it", dlock.ErrLockLost, l.d.backend(), h.name)
			if err != nil {
				cause = fmt.Errorf("%w: sqllock: the %s session holding %q failed its check: %v", dlock.ErrLockLost, l.d.backend(), h.name, err)
			}
			h.end(cause)
			// Killed, dead or silent: close it, and end it on the server
			// in case it is merely slow (it may still hold the lock).
			l.abandon(h.conn, &h.sess)
			return
		case <-leaseEnd:
			h.end(fmt.Errorf("%w: sqllock: the %v lease on %q ran out", dlock.ErrLockLost, h.lease, h.name))
			h.relErr = h.unlockAndReturn()
			return
		case <-l.closeCtx.Done():
			h.end(fmt.Errorf("%w: sqllock: %w", dlock.ErrLockLost, dlock.ErrClosed))
			h.relErr = h.unlockAndReturn()
			return
		case <-h.relReq:
			h.relErr = h.unlockAndReturn()
			h.end(nil)
			return
		}
	}
}

// unlockAndReturn releases the lock and returns the session to the pool,
// or closes the session (which releases the lock with it) when the release
// fails.
func (h *Hold) unlockAndReturn() error {
	l := h.l
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.opTimeout)
	defer cancel()
	ok, err := l.d.unlock(ctx, h.conn, h.key, h.shared)
	switch {
	case err != nil:
		l.abandon(h.conn, &h.sess)
		return fmt.Errorf("sqllock: release %q: %w (its session was closed instead)", h.name, err)
	case !ok:
		l.abandon(h.conn, &h.sess)
		return fmt.Errorf("sqllock: release %q: %w: its session no longer held it", h.name, dlock.ErrLockLost)
	}
	l.release(h.conn)
	return nil
}
