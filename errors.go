package dlock

import "github.com/dlock-dev/dlock/internal/lease"

// Errors returned by dlock. Test for them with errors.Is: the returned error
// usually wraps one of these with details.
var (
	// ErrNotHeld is returned by Unlock when the handle does not hold the lock.
	// Nothing is changed.
	ErrNotHeld = lease.ErrNotHeld

	// ErrAmbiguous is returned by Unlock, RUnlock, Extend, RExtend and
	// HoldCount when the Client has several holds the call could mean and
	// its context names none of them: several read holds of one RWMutex,
	// and a context that carries none of them and took none or more than
	// one of them. Nothing is changed. Unlock with the context the lock
	// call returned (ReadContext, LockContext, WithLock's fn), or with the
	// one the lock call was given when each caller has its own.
	ErrAmbiguous = lease.ErrAmbiguous

	// ErrLockLost is wrapped by every reason a hold ended without Unlock: it is
	// the cause of the hold's context, what Err returns, and what Unlock returns
	// for a hold that had been lost. A *LossError says which reason; errors.Is
	// also matches the reason's own sentinel (ErrUnconfirmed, ErrTakenOver,
	// ErrForced, ErrDataLost, ErrRenewRefused, ErrClosed, ErrLeaseEnded,
	// ErrMaxHold, ErrReleaseFailed).
	ErrLockLost = lease.ErrLockLost

	// ErrWaitTimeout is returned by WithLock when the lock was not acquired
	// within the wait time.
	ErrWaitTimeout = lease.ErrWaitTimeout

	// ErrInvalidArgument is returned, before any network call, for bad input:
	// an empty or oversized name, a nonsensical duration, a nil client.
	ErrInvalidArgument = lease.ErrInvalidArgument

	// ErrUpgrade is returned at once by the write side of an RWMutex when the
	// caller holds only its read side: a read→write upgrade could wait
	// forever (two readers upgrading wait for each other), so it is refused.
	// Release the read holds first, or take the write lock from the start.
	ErrUpgrade = lease.ErrUpgrade

	// ErrNotReplicated is returned, with WithReplicaAck, when a grant did not
	// reach enough replicas in time; the grant has been released.
	ErrNotReplicated = lease.ErrNotReplicated

	// ErrClosed is returned by every operation on a Client after Close, and by
	// its handles. A hold that Close ended wraps it too.
	ErrClosed = lease.ErrClosed

	// ErrUnavailable is returned when Redis did not answer within the time
	// the caller gave (the wait of TryLock or WithLock): the call failed for
	// want of Redis, not because the lock was busy. It wraps the last
	// network error seen, if any.
	ErrUnavailable = lease.ErrUnavailable

	// ErrReleased is the cause of a hold's context after the hold's final
	// Unlock (context.Cause): a lock call with that context returns an
	// error matching both it and context.Canceled.
	ErrReleased = lease.ErrReleased

	// ErrNotLock is returned by Inspect for a key that exists but is not a
	// lock (a string, a list, ...), and by ForceUnlock for such a key or a
	// hash whose fields are not a lock's, which it leaves as it is.
	ErrNotLock = lease.ErrNotLock
)

// The reasons a hold is lost. Each is wrapped by a *LossError, which also
// matches ErrLockLost.
var (
	// ErrUnconfirmed: the watchdog could not confirm the hold before its TTL
	// (less a margin for clock drift) ran out: Redis did not answer, or
	// answered too slowly. The lock may still be held in Redis until its TTL.
	ErrUnconfirmed = lease.ErrUnconfirmed
	// ErrTakenOver: Redis answered that the owner no longer holds the lock:
	// it expired (the process was paused past its TTL), or another owner has it.
	ErrTakenOver = lease.ErrTakenOver
	// ErrForced: ForceUnlock (or dlock unlock --force) took the lock away.
	ErrForced = lease.ErrForced
	// ErrDataLost: the lock and its fencing counter are gone: Redis lost its
	// data (a restart without persistence, FLUSHALL, a failover to a replica
	// that never got the grant). It is told even when another owner was
	// granted the lock since, however soon, unless Redis refused the key
	// that keeps the fencing sequence's start (see COMPATIBILITY.md): then
	// a grant within a few milliseconds of ours passes for ErrTakenOver
	// at a renewal, and for nothing at Unlock. A fencing sequence also ends
	// by its TTL (24h), held or not: a renewal of a hold whose sequence
	// began more than 22.5h before says ErrTakenOver for either.
	ErrDataLost = lease.ErrDataLost
	// ErrRenewRefused: renewal kept failing with an error reply from Redis
	// (READONLY, OOM, NOPERM, ...) until the hold could no longer be vouched
	// for. The LossError wraps that reply.
	ErrRenewRefused = lease.ErrRenewRefused
	// ErrLeaseEnded: a fixed lease (lease > 0) ran out.
	ErrLeaseEnded = lease.ErrLeaseEnded
	// ErrReleaseFailed: the final Unlock's release got no answer or an
	// error reply (the LossError wraps it): the lock may stay held in Redis
	// until its TTL ends. The hold is over for its owner all the same.
	ErrReleaseFailed = lease.ErrReleaseFailed
	// ErrMaxHold: the hold reached its MaxHold (or the Client's
	// WithMaxHold): the watchdog stopped renewing it, and the lock expires
	// in Redis within a watchdog timeout unless released first.
	ErrMaxHold = lease.ErrMaxHold
)

// LossError says why a hold ended without Unlock. It matches ErrLockLost and
// its Reason with errors.Is, and the error that caused it (if any) through
// Unwrap. Find it with errors.As, in an error dlock returned or in a hold's
// context's cause. A LossError is immutable; safe for concurrent use.
type LossError struct {
	// Name is the lock's name.
	Name string
	// Reason is why the hold ended: ErrUnconfirmed, ErrTakenOver,
	// ErrForced, ErrDataLost, ErrRenewRefused, ErrClosed, ErrLeaseEnded,
	// ErrMaxHold or ErrReleaseFailed.
	Reason error
	// Err is the error that caused the loss (a renewal's or a release's),
	// or nil.
	Err error
}

// Error says which lock was lost and why.
func (e *LossError) Error() string { return (*lease.LossError)(e).Error() }

// Unwrap returns ErrLockLost, the reason and the underlying error (if any).
func (e *LossError) Unwrap() []error { return (*lease.LossError)(e).Unwrap() }

// The engine's losses are its own type, of the same fields: errors.As with
// a *LossError target finds them as this one, the same value.
func init() {
	lease.AsPublic = func(e *lease.LossError, target any) bool {
		p, ok := target.(**LossError)
		if ok {
			*p = (*LossError)(e)
		}
		return ok
	}
}

// publicErr returns err, a loss the engine made as a *LossError: what a
// handle's Err returns can be type-switched as its documentation says.
func publicErr(err error) error {
	if le, ok := err.(*lease.LossError); ok {
		return (*LossError)(le)
	}
	return err
}
