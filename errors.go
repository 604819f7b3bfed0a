package dlock

import "errors"

// Errors returned by dlock. Test for them with errors.Is: the returned error
// usually wraps one of these with details.
var (
	// ErrNotHeld is returned by Unlock when the handle does not hold the lock.
	// Nothing is changed.
	ErrNotHeld = errors.New("dlock: lock not held")

	// ErrLockLost is the cause of a holder's context when its hold ended
	// without Unlock: Redis said another owner has the lock, or renewal could
	// not confirm the hold before its TTL ran out, or a fixed lease expired.
	// Unlock also returns it when the hold had already been lost.
	ErrLockLost = errors.New("dlock: lock lost")

	// ErrWaitTimeout is returned by WithLock when the lock was not acquired
	// within the wait time.
	ErrWaitTimeout = errors.New("dlock: wait timed out")

	// ErrInvalidArgument is returned, before any network call, for bad input:
	// an empty or oversized name, a nonsensical duration, a nil client.
	ErrInvalidArgument = errors.New("dlock: invalid argument")

	// ErrUpgrade is returned at once by the write side of an RWMutex whose
	// handle holds only its read side: a read→write upgrade could wait
	// forever (two readers upgrading wait for each other), so it is refused.
	// Release the read holds first, or take the write lock from the start.
	ErrUpgrade = errors.New("dlock: read to write upgrade refused")

	// ErrNotReplicated is returned, with WithReplicaAck, when a grant did not
	// reach enough replicas in time; the grant has been released.
	ErrNotReplicated = errors.New("dlock: grant not acknowledged by enough replicas")

	// ErrClosed is returned by every operation on a Client after Close, and by
	// its handles.
	ErrClosed = errors.New("dlock: client closed")
)
