package dlock

import (
	"context"

	"github.com/dlock-dev/dlock/internal/kind"
)

// The types of LockInfo.
const (
	TypeLock      = kind.TypeLock      // a Mutex, FairMutex or RWMutex name
	TypeElection  = kind.TypeElection  // an Election
	TypeSemaphore = kind.TypeSemaphore // a Semaphore
	TypeLatch     = kind.TypeLatch     // a CountDownLatch dlock armed (Locks only)
)

// LockInfo is a snapshot of one lock name as Redis has it, for operators
// and tools; see Client.Inspect. Its fields: Type (TypeLock, TypeElection,
// TypeSemaphore or TypeLatch), Name, Locked, Mode ("" for Mutex and
// FairMutex, "read" or "write" for RWMutex), Holders (sorted by owner), TTL
// (0 when not locked, -1 when the key has none), Token (the last fencing
// token issued for the name), Waiters (queued for a hand-off, first first),
// WaitingWriters (an RWMutex's), Leader (an election's value), Permits (a
// semaphore's size) and Count (a latch's count; Locked while above zero).
// A LockInfo is a value; safe to copy and share.
type LockInfo = kind.LockInfo

// Holder is one owner of a lock: Owner ("<client id>:<n>"; an RWMutex writer's
// ends in ":write"), Count (its reentrant hold count), TTL (a semaphore
// permit's remaining lease; 0 for lock holders) and Host and PID (the holder's
// process, when its client id is New's default; see ParseClientID).
type Holder = kind.Holder

// Waiter is one queued waiter: Owner ("<client id>:<n>") and the TTL it
// asked for.
type Waiter = kind.Waiter

// Inspect reads the state of the lock name in one transaction (MULTI) and
// changes nothing. It understands every dlock layout and Redisson's RLock and
// RReadWriteLock hashes; a key of another type gives an error wrapping
// ErrNotLock. It is safe for concurrent use.
func (c *Client) Inspect(ctx context.Context, name string) (LockInfo, error) {
	return kind.Inspect(ctx, c.e, name)
}

// Locks lists the locks, elections, semaphores and latches dlock knows of in Redis
// (every master of a Cluster) whose names match the Redis glob pattern match
// ("" or "*" for all; read as the server's SCAN MATCH reads it, matched
// without backtracking, at most 4096 bytes or ErrInvalidArgument) and that
// are in use now: locks and elections held or led, semaphores with permits
// taken, latches armed. dlock's own keys beside them (fencing counters,
// queues, records of long holds) are never listed as names;
// LocksWithHistory adds the names used lately. It finds them with SCAN in
// pages of discover.ScanCount (never KEYS), one HRANDFIELD per hash
// (pipelined per page) to tell lock hashes from other hashes, and then
// reads each one in
// one MULTI, as Inspect does; it changes nothing. The result is sorted by
// Type, then Name. Cost grows with the number of keys in Redis: this is a
// tool for operators, not for a request path. When ctx ends, Locks returns
// and its scan stops before its next SCAN call. Safe for concurrent use.
//
// A lock's LockInfo is Inspect's; an election's has Leader, its holder and
// its waiting candidates (Name is the election's name); a semaphore's has
// Permits, a holder per permit (with its TTL) and its queued waiters; a
// latch's, Count and TTL (latches dlock's TrySetCount armed: see
// CountDownLatch). Inspect reads locks only.
func (c *Client) Locks(ctx context.Context, match string) ([]LockInfo, error) {
	return kind.Locks(ctx, c.e, match, false)
}

// LocksWithHistory is Locks plus the locks and elections nobody holds now
// whose fencing counter is alive: used within its TTL (24 h by default),
// each listed not Locked, with the last Token issued. On a Redis with many
// names this list is long; it costs one more SCAN of the keyspace. Safe for
// concurrent use.
func (c *Client) LocksWithHistory(ctx context.Context, match string) ([]LockInfo, error) {
	return kind.Locks(ctx, c.e, match, true)
}
