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

	"github.com/dlock-dev/dlock/internal/discover"
	"github.com/dlock-dev/dlock/internal/keys"
)

// The types of LockInfo.
const (
	TypeLock      = "lock"      // a Mutex, FairMutex or RWMutex name
	TypeElection  = "election"  // an Election
	TypeSemaphore = "semaphore" // a Semaphore
)

// Locks lists the locks, elections and semaphores dlock knows of in Redis
// (every master of a Cluster) whose names match the Redis glob pattern match
// ("" or "*" for all): held ones, and ones with a fencing counter alive
// (they were held in the last 24h). It finds them with SCAN in pages of
// discover.ScanCount (never KEYS), one HRANDFIELD per hash (pipelined per
// page) to tell lock hashes from other hashes, and then reads each one in
// one MULTI, as Inspect does; it changes nothing. The result is sorted by
// Type, then Name. Cost grows with the number of keys in Redis: this is a
// tool for operators, not for a request path. Safe for concurrent use.
//
// A lock's LockInfo is Inspect's; an election's has Leader, its holder and
// its waiting candidates (Name is the election's name); a semaphore's has
// Permits, a holder per permit (with its TTL) and its queued waiters.
func (c *Client) Locks(ctx context.Context, match string) ([]LockInfo, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if c.e.Closed() {
		return nil, ErrClosed
	}
	if match == "*" {
		match = ""
	}
	f, _, err := wire.Go(c.e.Wire, ctx, func(ctx context.Context) (discover.Found, error) {
		return discover.Run(ctx, c.e.Redis(), discover.Options{Match: match, Semaphores: true})
	}, nil)
	if err != nil {
		return nil, err
	}
	var out []LockInfo
	for n := range f.Locks {
		info, err := c.Inspect(ctx, n)
		if errors.Is(err, ErrNotLock) {
			continue // another type now
		}
		if err != nil {
			return out, err
		}
		out = append(out, info)
	}
	for n := range f.Elections {
		info, err := c.Inspect(ctx, keys.Election(n).Lock)
		if errors.Is(err, ErrNotLock) {
			continue
		}
		if err != nil {
			return out, err
		}
		info.Type, info.Name = TypeElection, n
		out = append(out, info)
	}
	for n := range f.Semaphores {
		info, err := c.inspectSemaphore(ctx, n)
		if err != nil {
			return out, err
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// inspectSemaphore reads a semaphore's permits, size and queue in one MULTI.
func (c *Client) inspectSemaphore(ctx context.Context, name string) (LockInfo, error) {
	info := LockInfo{Type: TypeSemaphore, Name: name}
	ks := keys.Semaphore(name)
	var permits *redis.ZSliceCmd
	var size *redis.StringCmd
	var queue *redis.StringSliceCmd
	var pttl *redis.DurationCmd
	var now *redis.TimeCmd
	_, _, err := wire.Go(c.e.Wire, ctx, func(ctx context.Context) ([]redis.Cmder, error) {
		return c.e.Redis().TxPipelined(ctx, func(p redis.Pipeliner) error {
			now = p.Time(ctx)
			permits = p.ZRangeWithScores(ctx, ks.Permits, 0, -1)
			size = p.Get(ctx, ks.Size)
			queue = p.LRange(ctx, ks.Queue, 0, -1)
			pttl = p.PTTL(ctx, ks.Permits)
			return nil
		})
	}, nil)
	if err != nil && !errors.Is(err, redis.Nil) {
		return info, err
	}
	nowMs := now.Val().UnixMilli()
	for _, z := range permits.Val() {
		left := time.Duration(int64(z.Score)-nowMs) * time.Millisecond
		if left <= 0 {
			continue // expired, not yet reaped
		}
		owner, _ := z.Member.(string)
		host, pid, _ := ParseClientID(owner)
		info.Holders = append(info.Holders, Holder{Owner: owner, Count: 1, TTL: left, Host: host, PID: pid})
	}
	info.Locked = len(info.Holders) > 0
	if d := pttl.Val(); info.Locked && d > 0 {
		info.TTL = d
	}
	info.Permits, _ = strconv.Atoi(size.Val())
	for _, e := range queue.Val() {
		if _, ms, owner, ok := keys.ParseQueueEntry(e); ok {
			info.Waiters = append(info.Waiters, Waiter{Owner: owner, TTL: time.Duration(ms) * time.Millisecond})
		}
	}
	return info, nil
}
