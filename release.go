package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

func (m *Mutex) release(ctx context.Context, all bool) (err error) {
	if len(m.c.cfg.observers) > 0 {
		finish := m.c.observeRelease(ctx, m.kind, m.name)
		var final bool
		var held time.Duration
		defer func() {
			if errors.Is(err, ErrNotHeld) || err == ErrClosed {
				final, held = false, 0 // nothing was released
			}
			finish(Release{Kind: m.kind, Name: m.name, Final: final, Held: held, Err: err})
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
		if final && h.entry != nil && h.lostErr() == nil {
			// Redis had more holds than the handle knew (a re-entry whose
			// reply was lost): the hold goes on, so must its renewal.
			m.c.renewer.Add(h.entry, m.c.cfg.watchdog/3)
		}
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
	// The holder learns first that its hold ends (its WithLock context is
	// cancelled, Done closes), then the lock is released for others.
	m.mu.Lock()
	h := m.h
	m.mu.Unlock()
	if h != nil {
		h.lose(errClosedHold)
	}
	err := m.release(ctx, true)
	if errors.Is(err, ErrNotHeld) || err == errClosedHold {
		return nil
	}
	return err
}
