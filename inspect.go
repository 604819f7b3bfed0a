package dlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/kind"
)

// The types of LockInfo: the strings "lock", "election", "semaphore" and
// "latch", as dlock inspect --json prints them.
const (
	TypeLock      = kind.TypeLock      // "lock": a Mutex, FairMutex or RWMutex name
	TypeElection  = kind.TypeElection  // "election": an Election
	TypeSemaphore = kind.TypeSemaphore // "semaphore": a Semaphore
	TypeLatch     = kind.TypeLatch     // "latch": a CountDownLatch dlock armed (Locks only)
)

// MaxWaitersListed is how many waiters a LockInfo lists at most, 100 (the
// first ones; MoreWaiters counts the rest): reading a queue costs Redis
// time in proportion to what it returns, and a queue may be made long by
// anyone allowed to write to it.
const MaxWaitersListed = kind.MaxWaitersListed

// LockInfo is a snapshot of one lock name as Redis has it, for operators
// and tools; see Client.Inspect and Client.Locks. A LockInfo is a value;
// safe to copy and share.
type LockInfo struct {
	// Type is TypeLock for Mutex, FairMutex and RWMutex names (Inspect's
	// only type), TypeElection, TypeSemaphore or TypeLatch (Locks only).
	Type string
	// Name is the lock's name (an election's or a semaphore's name for
	// those).
	Name string
	// Locked reports that somebody holds it (a latch: its count is above
	// zero).
	Locked bool
	// Mode is "" for Mutex and FairMutex, "read" or "write" for RWMutex.
	Mode string
	// Holders are its owners, sorted by owner.
	Holders []Holder
	// TTL is the remaining time to live: 0 when not locked, -1 when the
	// key has none.
	TTL time.Duration
	// Token is the last fencing token issued for the name (0: none alive).
	Token uint64
	// Waiters are the waiters queued for a direct hand-off (Mutex,
	// FairMutex, Semaphore), first first: the first MaxWaitersListed.
	Waiters []Waiter
	// MoreWaiters counts the waiters queued behind those listed.
	MoreWaiters int
	// WaitingWriters counts the writers of an RWMutex waiting for it.
	WaitingWriters int
	// Leader is an election's leader value ("" when nobody leads).
	Leader string
	// Permits is a semaphore's number of permits (its size).
	Permits int
	// Count is a latch's count; its LockInfo is Locked while the count is
	// above zero, and TTL is the count's.
	Count int64
}

// Holder is one owner of a lock, in a LockInfo. A Holder is a value; safe
// to copy and share.
type Holder struct {
	// Owner is "<client id>:<n>"; an RWMutex writer's ends in ":write", a
	// semaphore permit of k > 1 permits in "#<k>" (its permit id).
	Owner string
	// Count is the reentrant hold count; a semaphore permit's number of
	// permits.
	Count int64
	// TTL is a semaphore permit's remaining lease; 0 for lock holders
	// (LockInfo.TTL is the lock's).
	TTL time.Duration
	// Host is the holder's host when its client id is New's default (see
	// ParseClientID); empty otherwise.
	Host string
	// PID is the holder's process id, with Host; 0 otherwise.
	PID int
	// HeldFor is how long ago a hold the watchdog has renewed was granted,
	// by the holder's clock against the server's; 0 for a hold not yet
	// renewed (younger than a third of the watchdog timeout) or with a
	// fixed lease.
	HeldFor time.Duration
	// Renewals is how many renewal periods HeldFor is (0 with it).
	Renewals int64
}

// Waiter is one queued waiter, in a LockInfo. A Waiter is a value; safe to
// copy and share.
type Waiter struct {
	// Owner is the waiter's owner field, "<client id>:<n>".
	Owner string
	// TTL is the lease it asked for.
	TTL time.Duration
}

// lockInfo turns the engine's snapshot into the public one (kind.Public:
// the compiler checks that the public types have the engine's fields).
func lockInfo(k kind.LockInfo) LockInfo { return kind.Public[LockInfo](k) }

// Inspect reads the state of the lock name in one transaction (MULTI) and
// changes nothing. It understands every dlock layout and Redisson's RLock and
// RReadWriteLock hashes; a key of another type gives an error wrapping
// ErrNotLock. It is safe for concurrent use.
func (c *Client) Inspect(ctx context.Context, name string) (LockInfo, error) {
	k, err := kind.Inspect(ctx, c.e, name)
	return lockInfo(k), err
}

// Locks lists the locks, elections, semaphores and latches dlock knows of in Redis
// (every master of a Cluster) whose names match the Redis glob pattern match
// ("" or "*" for all; read as the server's SCAN MATCH reads it, matched
// without backtracking, at most 4096 bytes or ErrInvalidArgument) and that
// are in use now: locks and elections held or led, semaphores with permits
// taken, latches armed. dlock's own keys beside them (fencing counters,
// queues, records of long holds) are never listed as names;
// LocksWithHistory adds the names used lately. It finds them with SCAN in
// pages of COUNT 1000 (never KEYS), one HRANDFIELD per hash
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
	return c.locks(ctx, match, false)
}

// LocksWithHistory is Locks plus the locks and elections nobody holds now
// whose fencing counter is alive: used within its TTL (24 h by default),
// each listed not Locked, with the last Token issued. On a Redis with many
// names this list is long; it costs one more SCAN of the keyspace. Safe for
// concurrent use.
func (c *Client) LocksWithHistory(ctx context.Context, match string) ([]LockInfo, error) {
	return c.locks(ctx, match, true)
}

func (c *Client) locks(ctx context.Context, match string, history bool) ([]LockInfo, error) {
	ks, err := kind.Locks(ctx, c.e, match, history)
	if ks == nil {
		return nil, err
	}
	infos := make([]LockInfo, len(ks))
	for i, k := range ks {
		infos[i] = lockInfo(k)
	}
	return infos, err
}
