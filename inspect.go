package dlock

import (
	"context"
	"errors"
	"fmt"
	"github.com/dlock-dev/dlock/internal/wire"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

// LockInfo is a snapshot of one lock name as Redis has it, for operators
// and tools; see Client.Inspect.
type LockInfo struct {
	// Type is TypeLock for Mutex, FairMutex and RWMutex names (Inspect's
	// only type), TypeElection or TypeSemaphore (see Client.Locks).
	Type    string
	Name    string
	Locked  bool
	Mode    string        // "" for Mutex and FairMutex; "read" or "write" for RWMutex
	Holders []Holder      // sorted by owner
	TTL     time.Duration // remaining TTL; 0 when not locked, -1 when the key has none
	Token   uint64        // the last fencing token issued for the name (0: none alive)
	Waiters []Waiter      // queued for a direct hand-off (Mutex, FairMutex), first first
	// WaitingWriters counts writers of an RWMutex waiting for the lock.
	WaitingWriters int
	// Leader is an election's leader value ("" when nobody leads).
	Leader string
	// Permits is a semaphore's number of permits.
	Permits int
}

// Holder is one owner of a lock and its reentrant hold count.
type Holder struct {
	Owner string // "<client id>:<n>"; an RWMutex writer ends in ":write"
	Count int64
	// TTL is a semaphore permit's remaining lease; 0 for lock holders
	// (LockInfo.TTL is the lock's).
	TTL time.Duration
	// Host and PID name the holder's process when its client id is
	// New's default (see ParseClientID); empty and 0 otherwise.
	Host string
	PID  int
}

// Waiter is one queued waiter.
type Waiter struct {
	Owner string        // "<client id>:<n>"
	TTL   time.Duration // the TTL it asked for
}

// Inspect reads the state of the lock name in one transaction (MULTI) and
// changes nothing. It understands every dlock layout and Redisson's RLock and
// RReadWriteLock hashes; a key of another type gives an error wrapping
// ErrNotLock. It is safe for concurrent use.
func (c *Client) Inspect(ctx context.Context, name string) (LockInfo, error) {
	info := LockInfo{Type: TypeLock, Name: name}
	if ctx == nil {
		return info, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if err := keys.Validate(name); err != nil {
		return info, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	if c.e.Closed() {
		return info, ErrClosed
	}
	ks := keys.For(name)
	var typ *redis.StatusCmd
	var fields *redis.MapStringStringCmd
	var pttl *redis.DurationCmd
	var fence *redis.StringCmd
	var queue *redis.StringSliceCmd
	var writers *redis.IntCmd
	_, _, err := wire.Go(c.e.Wire, ctx, func(ctx context.Context) ([]redis.Cmder, error) {
		return c.e.Redis().TxPipelined(ctx, func(p redis.Pipeliner) error {
			typ = p.Type(ctx, ks.Lock)
			fields = p.HGetAll(ctx, ks.Lock)
			pttl = p.PTTL(ctx, ks.Lock)
			fence = p.Get(ctx, ks.Fence)
			queue = p.LRange(ctx, ks.Queue, 0, -1)
			writers = p.ZCard(ctx, ks.Writers)
			return nil
		})
	}, nil)
	if err != nil && ctx.Err() != nil {
		return info, err
	}
	if t := typ.Val(); t != "" && t != "none" && t != "hash" {
		return info, fmt.Errorf("%w: %q is a Redis %s", ErrNotLock, name, t)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return info, err
	}
	for owner, v := range fields.Val() {
		if owner == "mode" {
			info.Mode = v
			continue
		}
		if owner == keys.LeaderField { // an election's lock: its leader, not an owner
			if _, val, ok := keys.ParseLeaderValue(v); ok {
				info.Leader = val
			}
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		host, pid, _ := ParseClientID(owner)
		info.Holders = append(info.Holders, Holder{Owner: owner, Count: n, Host: host, PID: pid})
	}
	sort.Slice(info.Holders, func(i, j int) bool { return info.Holders[i].Owner < info.Holders[j].Owner })
	info.Locked = len(info.Holders) > 0
	if d := pttl.Val(); info.Locked && (d > 0 || d == -1) {
		info.TTL = d
	}
	if v, err := fence.Uint64(); err == nil {
		info.Token = v
	}
	for _, e := range queue.Val() {
		if _, ms, owner, ok := keys.ParseQueueEntry(e); ok {
			info.Waiters = append(info.Waiters, Waiter{Owner: owner, TTL: time.Duration(ms) * time.Millisecond})
		}
	}
	info.WaitingWriters = int(writers.Val())
	return info, nil
}
