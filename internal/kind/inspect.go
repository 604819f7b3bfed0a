package kind

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/discover"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/wire"
)

// The types of LockInfo (dlock.TypeLock, ...).
const (
	TypeLock      = "lock"      // a Mutex, FairMutex or RWMutex name
	TypeElection  = "election"  // an Election
	TypeSemaphore = "semaphore" // a Semaphore
	TypeLatch     = "latch"     // a CountDownLatch dlock armed (Locks only)
)

// LockInfo is a snapshot of one lock name as Redis has it, for operators
// and tools (dlock.LockInfo).
type LockInfo struct {
	// Type is TypeLock for Mutex, FairMutex and RWMutex names (Inspect's
	// only type), TypeElection, TypeSemaphore or TypeLatch (see
	// Client.Locks).
	Type    string
	Name    string
	Locked  bool
	Mode    string        // "" for Mutex and FairMutex; "read" or "write" for RWMutex
	Holders []Holder      // sorted by owner
	TTL     time.Duration // remaining TTL; 0 when not locked, -1 when the key has none
	Token   uint64        // the last fencing token issued for the name (0: none alive)
	Waiters []Waiter      // queued for a direct hand-off (Mutex, FairMutex), first first; at most MaxWaitersListed
	// MoreWaiters counts the waiters queued behind the listed ones.
	MoreWaiters int
	// WaitingWriters counts writers of an RWMutex waiting for the lock.
	WaitingWriters int
	// Leader is an election's leader value ("" when nobody leads).
	Leader string
	// Permits is a semaphore's number of permits (its size).
	Permits int
	// Count is a latch's count; its LockInfo is Locked while the count is
	// above zero, and TTL is the count's.
	Count int64
}

// Holder is one owner of a lock and its reentrant hold count.
type Holder struct {
	// Owner is "<client id>:<n>"; an RWMutex writer ends in ":write", a
	// semaphore permit of k > 1 permits in "#<k>" (its permit id).
	Owner string
	// Count is the reentrant hold count; a semaphore permit's number of
	// permits.
	Count int64
	// TTL is a semaphore permit's remaining lease; 0 for lock holders
	// (LockInfo.TTL is the lock's).
	TTL time.Duration
	// Host and PID name the holder's process when its client id is
	// New's default (see ParseClientID); empty and 0 otherwise.
	Host string
	PID  int
	// HeldFor and Renewals describe a hold the watchdog has renewed: how
	// long ago it was granted (by the holder's clock against the server's)
	// and how many renewal periods that is. Both are 0 for a hold not yet renewed
	// (younger than a third of the watchdog timeout) or with a fixed lease.
	HeldFor  time.Duration
	Renewals int64
}

// MaxWaitersListed is how many waiters a LockInfo lists at most: a queue
// is read with LRANGE, which costs Redis (every Client on it) time in
// proportion to what it returns, and anyone allowed to write there may
// make it long.
const MaxWaitersListed = 100

// waiters fills info.Waiters from the queue's first entries and
// info.MoreWaiters from its length.
func (info *LockInfo) waiters(first []string, length int64) {
	for _, e := range first {
		if _, ms, owner, ok := keys.ParseQueueEntry(e); ok {
			info.Waiters = append(info.Waiters, Waiter{Owner: owner, TTL: time.Duration(ms) * time.Millisecond})
		}
	}
	info.MoreWaiters = max(int(length)-len(first), 0)
}

// Waiter is one queued waiter.
type Waiter struct {
	Owner string        // "<client id>:<n>"
	TTL   time.Duration // the TTL it asked for
}

// Inspect reads the state of the lock name in one MULTI (dlock.Client.Inspect).
func Inspect(ctx context.Context, e *lease.Engine, name string) (LockInfo, error) {
	info := LockInfo{Type: TypeLock, Name: name}
	if ctx == nil {
		return info, fmt.Errorf("%w: nil context", lease.ErrInvalidArgument)
	}
	if err := keys.Validate(name); err != nil {
		return info, fmt.Errorf("%w: %w", lease.ErrInvalidArgument, err)
	}
	if e.Closed() {
		return info, lease.ErrClosed
	}
	var r lockRead
	_, _, err := wire.Go(e.Wire, ctx, func(ctx context.Context) ([]redis.Cmder, error) {
		return e.Redis().TxPipelined(ctx, func(p redis.Pipeliner) error {
			r.add(ctx, p, e.Cfg.Space, name)
			return nil
		})
	}, nil)
	if err != nil && ctx.Err() != nil {
		return info, err // the read goes on in the background: r is not ours
	}
	typ, fields, pttl, fence, queue, writers := r.typ, r.fields, r.pttl, r.fence, r.waitQueue, r.writers
	if t := typ.Val(); t != "" && t != "none" && t != "hash" {
		return info, fmt.Errorf("%w: %q is a Redis %s", lease.ErrNotLock, name, t)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return info, err
	}
	info.holders(fields.Val(), r.held.Val(), r.now.Val())
	sort.Slice(info.Holders, func(i, j int) bool { return info.Holders[i].Owner < info.Holders[j].Owner })
	info.Locked = len(info.Holders) > 0
	if d := pttl.Val(); info.Locked && (d > 0 || d == -1) {
		info.TTL = d
	}
	if v, err := fence.Uint64(); err == nil {
		info.Token = v
	}
	info.waiters(queue.Val(), r.waitLen.Val())
	info.WaitingWriters = int(writers.Val())
	return info, nil
}

// Locks lists the locks, elections, semaphores and latches whose names
// match (dlock.Client.Locks); with history, also the names that only have
// a fencing counter left (dlock.Client.LocksWithHistory).
func Locks(ctx context.Context, e *lease.Engine, match string, history bool) ([]LockInfo, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", lease.ErrInvalidArgument)
	}
	if len(match) > discover.MaxPatternLen {
		return nil, fmt.Errorf("%w: match pattern of %d bytes, the limit is %d", lease.ErrInvalidArgument, len(match), discover.MaxPatternLen)
	}
	if e.Closed() {
		return nil, lease.ErrClosed
	}
	if match == "*" {
		match = ""
	}
	caller := ctx
	f, _, err := wire.Go(e.Wire, ctx, func(ctx context.Context) (discover.Found, error) {
		// wire.Go's ctx outlives the caller's: the scan stops with the caller.
		return discover.Run(ctx, e.Redis(), discover.Options{Match: match, Semaphores: true, Latches: true, History: history, Space: e.Cfg.Space, Abandon: caller})
	}, nil)
	if err != nil {
		return nil, err
	}
	election := func(ctx context.Context, n string) (LockInfo, error) {
		info, err := Inspect(ctx, e, keys.Companion(keys.ElectionPrefix, n))
		info.Type, info.Name = TypeElection, n
		return info, err
	}
	layout := func(fn func(context.Context, redis.UniversalClient, keys.Space, string) (LockInfo, error)) func(context.Context, string) (LockInfo, error) {
		return func(ctx context.Context, n string) (LockInfo, error) { return read(ctx, e, n, fn) }
	}
	var out []LockInfo
	for _, r := range []struct {
		names map[string]bool
		read  func(context.Context, string) (LockInfo, error)
	}{
		{f.Locks, func(ctx context.Context, n string) (LockInfo, error) { return Inspect(ctx, e, n) }},
		{f.Elections, election},
		{f.Semaphores, layout(ReadSemaphore)},
		{f.Latches, layout(ReadLatch)},
	} {
		for n := range r.names {
			info, err := r.read(ctx, n)
			if errors.Is(err, lease.ErrNotLock) || wrongType(err) {
				// Another type now, or gone since the scan; or a key beside
				// it of another type (a neighbour's): this name cannot be
				// read, the others still can.
				continue
			}
			if err != nil {
				return out, err
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Type != out[j].Type {
			return out[i].Type < out[j].Type
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// wrongType reports whether err is the server's WRONGTYPE reply.
func wrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// read runs a reader of a kind's layout (ReadSemaphore, ReadLatch) on e's
// Redis, returning at once when ctx ends first.
func read(ctx context.Context, e *lease.Engine, name string, fn func(context.Context, redis.UniversalClient, keys.Space, string) (LockInfo, error)) (LockInfo, error) {
	info, _, err := wire.Go(e.Wire, ctx, func(ctx context.Context) (LockInfo, error) {
		return fn(ctx, e.Redis(), e.Cfg.Space, name)
	}, nil)
	return info, err
}

// ReadLatch reads the latch name dlock armed: its count and the count's
// TTL, in one MULTI (GET, PTTL). A latch whose count is gone, or is not a
// count, gives an error wrapping lease.ErrNotLock. The CLI's dashboard
// calls it directly; Client.Locks through its wire.
func ReadLatch(ctx context.Context, rdb redis.UniversalClient, space keys.Space, name string) (LockInfo, error) {
	info := LockInfo{Type: TypeLatch, Name: name}
	var count *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		count = p.Get(ctx, space.Latch(name).Count)
		pttl = p.PTTL(ctx, space.Latch(name).Count)
		return nil
	})
	if errors.Is(err, redis.Nil) || (err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")) {
		return info, fmt.Errorf("%w: latch %q has no count", lease.ErrNotLock, name)
	}
	if err != nil {
		return info, err
	}
	n, err := count.Int64()
	if err != nil {
		return info, fmt.Errorf("%w: latch %q holds no count: %q", lease.ErrNotLock, name, count.Val())
	}
	info.Count, info.Locked = n, n > 0
	if d := pttl.Val(); d > 0 || d == -1 {
		info.TTL = d
	}
	return info, nil
}

// ReadSemaphore reads a semaphore's permits, size and queue in one MULTI.
// The CLI's dashboard calls it directly; Client.Locks through its wire.
func ReadSemaphore(ctx context.Context, rdb redis.UniversalClient, space keys.Space, name string) (LockInfo, error) {
	info := LockInfo{Type: TypeSemaphore, Name: name}
	ks := space.Semaphore(name)
	var permits *redis.ZSliceCmd
	var size *redis.StringCmd
	var queue *redis.StringSliceCmd
	var queueLen *redis.IntCmd
	var pttl *redis.DurationCmd
	var now *redis.TimeCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		permits = p.ZRangeWithScores(ctx, ks.Permits, 0, -1)
		size = p.Get(ctx, ks.Size)
		queue = p.LRange(ctx, ks.Queue, 0, MaxWaitersListed-1)
		queueLen = p.LLen(ctx, ks.Queue)
		pttl = p.PTTL(ctx, ks.Permits)
		return nil
	})
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
		host, pid, _ := keys.ParseClientID(owner)
		info.Holders = append(info.Holders, Holder{Owner: owner, Count: int64(keys.PermitWeight(owner)), TTL: left, Host: host, PID: pid})
	}
	info.Locked = len(info.Holders) > 0
	if d := pttl.Val(); info.Locked && d > 0 {
		info.TTL = d
	}
	info.Permits, _ = strconv.Atoi(size.Val())
	info.waiters(queue.Val(), queueLen.Val())
	return info, nil
}

// holders reads a lock hash's fields: the mode, an election's leader, and
// an owner per other field.
func (info *LockInfo) holders(fields, held map[string]string, now time.Time) {
	for owner, v := range fields {
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
		host, pid, _ := keys.ParseClientID(owner)
		h := Holder{Owner: owner, Count: n, Host: host, PID: pid}
		if granted, period, ok := keys.ParseHeldRecord(held[owner]); ok && period > 0 {
			h.HeldFor = max(now.Sub(time.UnixMilli(granted)), 0)
			h.Renewals = h.HeldFor.Milliseconds() / period
		}
		info.Holders = append(info.Holders, h)
	}
}

// lockRead is Inspect's one MULTI.
type lockRead struct {
	typ          *redis.StatusCmd
	fields, held *redis.MapStringStringCmd
	pttl         *redis.DurationCmd
	fence        *redis.StringCmd
	waitQueue    *redis.StringSliceCmd
	waitLen      *redis.IntCmd
	writers      *redis.IntCmd
	now          *redis.TimeCmd
}

// add adds the waitQueue of the lock name to p.
func (r *lockRead) add(ctx context.Context, p redis.Pipeliner, space keys.Space, name string) {
	ks := space.For(name)
	r.typ = p.Type(ctx, ks.Lock)
	r.fields = p.HGetAll(ctx, ks.Lock)
	r.held = p.HGetAll(ctx, space.Held(ks.Lock))
	r.pttl = p.PTTL(ctx, ks.Lock)
	r.fence = p.Get(ctx, ks.Fence)
	r.waitQueue = p.LRange(ctx, ks.Queue, 0, MaxWaitersListed-1)
	r.waitLen = p.LLen(ctx, ks.Queue)
	r.writers = p.ZCard(ctx, ks.Writers)
	r.now = p.Time(ctx)
}
