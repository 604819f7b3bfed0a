package dlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// SyncLocker returns a sync.Locker over l, for code that takes one (a
// sync.Cond, a library that accepts a sync.Locker). sync.Locker's methods
// cannot return an error, so:
//
//   - Lock calls l.Lock with a background context until it succeeds. After
//     each failure (Redis unreachable, a Redis error) it reports the error to
//     onError and tries again after a backoff that doubles from 10ms to 1s,
//     with jitter. It never returns without the lock and never panics; on a
//     Client that is closed, or with a name that is invalid, it therefore
//     blocks for good (reporting ErrClosed or ErrInvalidArgument each
//     second), as sync.Mutex.Lock blocks on a mutex never unlocked.
//   - Unlock calls l.Unlock with a background context bounded by the
//     Client's cleanup timeout (WithCleanupTimeout); its error (ErrNotHeld,
//     a loss wrapping ErrLockLost, a Redis error, a release that goes on in
//     the background past the bound) goes to onError.
//
// The hold is in watchdog mode, so a loss while held is reported only at
// Unlock; code that must react to a loss at once should use the Locker
// itself. onError may be nil (errors are then dropped); it is called from
// the goroutine calling Lock or Unlock. The returned Locker is safe for
// concurrent use, with l's semantics (a Mutex admits one holder at a time).
//
// A nil l (or a nil *Mutex, *FairMutex or *RWMutex in it) is an invalid
// argument like an invalid name: Lock blocks for good, reporting
// ErrInvalidArgument, and Unlock reports it.
func SyncLocker(l Locker, onError func(error)) sync.Locker {
	if onError == nil {
		onError = func(error) {}
	}
	s := &syncLocker{l: l, onError: onError}
	if l == nil || reflect.ValueOf(l).Kind() == reflect.Pointer && reflect.ValueOf(l).IsNil() {
		s.err = fmt.Errorf("%w: SyncLocker of a nil Locker", ErrInvalidArgument)
	}
	return s
}

type syncLocker struct {
	l       Locker
	err     error // a nil l: every call reports it
	onError func(error)
}

// SyncLocker backoff bounds.
const (
	syncLockerMinBackoff = 10 * time.Millisecond
	syncLockerMaxBackoff = time.Second
)

func (s *syncLocker) Lock() {
	backoff := syncLockerMinBackoff
	for {
		err := s.err
		if err == nil {
			err = s.l.Lock(context.Background())
		}
		if err == nil {
			return
		}
		s.onError(err)
		time.Sleep(backoff/2 + rand.N(backoff/2+1))
		backoff = min(2*backoff, syncLockerMaxBackoff)
	}
}

func (s *syncLocker) Unlock() {
	if s.err != nil {
		s.onError(s.err)
		return
	}
	// Bounded, yet standing for the caller whose holds were taken with
	// context.Background() (which hold an Unlock means follows the context
	// its lock call was given).
	ctx, cancel := context.WithTimeout(context.Background(), s.cleanupTimeout())
	defer cancel()
	if err := s.l.Unlock(lease.AsCaller(ctx, context.Background())); err != nil {
		s.onError(err)
	}
}

// cleanupTimeout bounds Unlock, which has no context: against a Redis that
// accepts and never answers, the release of a context that never ends
// waited for good (it then goes on in the background, and onError is told).
func (s *syncLocker) cleanupTimeout() time.Duration {
	switch l := s.l.(type) {
	case Member:
		if hd := l.member(); hd != nil {
			return hd.Engine().Cfg.CleanupTimeout
		}
	case *MultiLock:
		if l.c != nil {
			return l.c.cfg.CleanupTimeout
		}
	}
	return defaultConfig().CleanupTimeout
}
