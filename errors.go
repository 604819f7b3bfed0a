package dlock

import (
	"errors"
	"fmt"
)

// Errors returned by dlock. Test for them with errors.Is: the returned error
// usually wraps one of these with details.
var (
	// ErrNotHeld is returned by Unlock when the handle does not hold the lock.
	// Nothing is changed.
	ErrNotHeld = errors.New("dlock: lock not held")

	// ErrLockLost is wrapped by every reason a hold ended without Unlock: it
	// is the cause of the hold's context, what Err returns, and what Unlock
	// returns for a hold that had been lost. A *LossError says which reason;
	// errors.Is also matches the reason's own sentinel (ErrUnconfirmed,
	// ErrTakenOver, ErrForced, ErrDataLost, ErrRenewRefused, ErrClosed,
	// ErrLeaseEnded).
	ErrLockLost = errors.New("dlock: lock lost")

	// ErrWaitTimeout is returned by WithLock when the lock was not acquired
	// within the wait time.
	ErrWaitTimeout = errors.New("dlock: wait timed out")

	// ErrInvalidArgument is returned, before any network call, for bad input:
	// an empty or oversized name, a nonsensical duration, a nil client.
	ErrInvalidArgument = errors.New("dlock: invalid argument")

	// ErrUpgrade is returned at once by the write side of an RWMutex when the
	// caller holds only its read side: a read→write upgrade could wait
	// forever (two readers upgrading wait for each other), so it is refused.
	// Release the read holds first, or take the write lock from the start.
	ErrUpgrade = errors.New("dlock: read to write upgrade refused")

	// ErrNotReplicated is returned, with WithReplicaAck, when a grant did not
	// reach enough replicas in time; the grant has been released.
	ErrNotReplicated = errors.New("dlock: grant not acknowledged by enough replicas")

	// ErrClosed is returned by every operation on a Client after Close, and by
	// its handles. A hold that Close ended wraps it too.
	ErrClosed = errors.New("dlock: client closed")

	// ErrUnavailable is returned when Redis did not answer within the time
	// the caller gave (the wait of TryLock or WithLock): the call failed for
	// want of Redis, not because the lock was busy. It wraps the last
	// network error seen, if any.
	ErrUnavailable = errors.New("dlock: redis did not answer in time")

	// ErrNotLock is returned by Inspect for a key that exists but is not a
	// lock (a string, a list, ...).
	ErrNotLock = errors.New("dlock: key is not a lock")
)

// The reasons a hold is lost. Each is wrapped by a *LossError, which also
// matches ErrLockLost.
var (
	// ErrUnconfirmed: the watchdog could not confirm the hold before its TTL
	// (less a margin for clock drift) ran out: Redis did not answer, or
	// answered too slowly. The lock may still be held in Redis until its TTL.
	ErrUnconfirmed = errors.New("renewal could not confirm the hold in time")
	// ErrTakenOver: Redis answered that the owner no longer holds the lock:
	// it expired (the process was paused past its TTL), or another owner has it.
	ErrTakenOver = errors.New("the lock expired or another owner has it")
	// ErrForced: ForceUnlock (or dlock unlock --force) took the lock away.
	ErrForced = errors.New("the lock was taken by ForceUnlock")
	// ErrDataLost: the lock and its fencing counter are gone: Redis lost its
	// data (a restart without persistence, FLUSHALL, a failover to a replica
	// that never got the grant).
	ErrDataLost = errors.New("redis lost the lock's data")
	// ErrRenewRefused: renewal kept failing with an error reply from Redis
	// (READONLY, OOM, NOPERM, ...) until the hold could no longer be vouched
	// for. The LossError wraps that reply.
	ErrRenewRefused = errors.New("redis refused the renewal")
	// ErrLeaseEnded: a fixed lease (lease > 0) ran out.
	ErrLeaseEnded = errors.New("the lease ended")
	// ErrMaxHold: the hold reached its MaxHold (or the Client's
	// WithMaxHold): the watchdog stopped renewing it, and the lock expires
	// in Redis within a watchdog timeout unless released first.
	ErrMaxHold = errors.New("the hold reached its MaxHold")
)

// LossError says why a hold ended without Unlock. It matches ErrLockLost and
// its Reason with errors.Is, and the error that caused it (if any) through
// Unwrap. A LossError is immutable; safe for concurrent use.
type LossError struct {
	Name   string // the lock name
	Reason error  // ErrUnconfirmed, ErrTakenOver, ErrForced, ErrDataLost, ErrRenewRefused, ErrClosed, ErrLeaseEnded or ErrMaxHold
	Err    error  // the underlying error, or nil
}

func (e *LossError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("dlock: lock %q lost: %v: %v", e.Name, e.Reason, e.Err)
	}
	return fmt.Sprintf("dlock: lock %q lost: %v", e.Name, e.Reason)
}

// Unwrap returns ErrLockLost, the reason and the underlying error.
func (e *LossError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrLockLost, e.Reason, e.Err}
	}
	return []error{ErrLockLost, e.Reason}
}

func lossError(name string, reason, err error) *LossError {
	return &LossError{Name: name, Reason: reason, Err: err}
}
