package lease

import (
	"errors"
	"fmt"
)

// The errors of dlock; the root package documents each under the same name.
var (
	ErrNotHeld         = errors.New("dlock: lock not held")
	ErrAmbiguous       = errors.New("dlock: several holds and the context names none")
	ErrLockLost        = errors.New("dlock: lock lost")
	ErrWaitTimeout     = errors.New("dlock: wait timed out")
	ErrInvalidArgument = errors.New("dlock: invalid argument")
	ErrUpgrade         = errors.New("dlock: read to write upgrade refused")
	ErrNotReplicated   = errors.New("dlock: grant not acknowledged by enough replicas")
	ErrClosed          = errors.New("dlock: client closed")
	ErrUnavailable     = errors.New("dlock: redis did not answer in time")
	ErrNotLock         = errors.New("dlock: key is not a lock")
	ErrReleased        = errors.New("dlock: lock released")
	ErrUnconfirmed     = errors.New("renewal could not confirm the hold in time")
	ErrTakenOver       = errors.New("the lock expired or another owner has it")
	ErrForced          = errors.New("the lock was taken by ForceUnlock")
	ErrDataLost        = errors.New("redis lost the lock's data")
	ErrRenewRefused    = errors.New("redis refused the renewal")
	ErrLeaseEnded      = errors.New("the lease ended")
	ErrMaxHold         = errors.New("the hold reached its MaxHold")
	ErrReleaseFailed   = errors.New("the release failed; the lock ends by its TTL")
)

// LossError says why a hold ended without Unlock. It matches ErrLockLost and
// its Reason with errors.Is, and the error that caused it (if any) through
// Unwrap. A LossError is immutable; safe for concurrent use.
type LossError struct {
	Name   string // the lock name
	Reason error  // ErrUnconfirmed, ErrTakenOver, ErrForced, ErrDataLost, ErrRenewRefused, ErrClosed, ErrLeaseEnded, ErrMaxHold or ErrReleaseFailed
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

// AsPublic, set by the root package, lets errors.As find a *LossError as
// the public dlock.LossError (a type of the same fields the engine cannot
// name): it reports whether target is a pointer to one, and sets it.
var AsPublic func(e *LossError, target any) bool

// As implements errors.As for the public twin of LossError (AsPublic).
func (e *LossError) As(target any) bool { return AsPublic != nil && AsPublic(e, target) }

func lossError(name string, reason, err error) *LossError {
	return &LossError{Name: name, Reason: reason, Err: err}
}

// Why an owner's field is missing, as the renewal and release scripts
// answer it (lib.lua's GONE, FORCED and DATA_LOST; a test of the kinds
// checks they agree).
const (
	CodeGone     = 0
	CodeForced   = 2
	CodeDataLost = 3
)

// GoneReason maps a why-gone code to the loss reason it means.
func GoneReason(code int64) error {
	switch code {
	case CodeForced:
		return ErrForced
	case CodeDataLost:
		return ErrDataLost
	}
	return ErrTakenOver
}
