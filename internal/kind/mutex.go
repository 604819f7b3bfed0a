package kind

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

var (
	//go:embed acquire.lua
	luaAcquire string
	//go:embed release.lua
	luaRelease string
	//go:embed leave.lua
	luaLeave string
	//go:embed force.lua
	luaForce string

	scriptAcquire = script(wire.WithLib(luaLib, luaAcquire))
	scriptRelease = script(wire.WithLib(luaLib, luaRelease))
	scriptLeave   = script(wire.WithLib(luaLib, luaLeave))
	scriptForce   = script(wire.WithLib(luaLib, luaForce))
)

// Mutex is the reentrant lock's protocol, fair or not: Redisson's hash, and
// a wait queue for the direct hand-off. One Mutex serves one handle.
type Mutex struct {
	e    *lease.Engine
	name string
	fair bool
	ks   keys.Set
	keys [4]any // the scripts' keys: pointers into ks, boxed without allocating
	// The release channel is made the first time a waiter needs it.
	channelOnce sync.Once
}

// Init prepares p for the lock name on e; a FairMutex's when fair. name
// must be valid (keys.Validate).
func (p *Mutex) Init(e *lease.Engine, name string, fair bool) {
	p.e, p.name, p.fair = e, name, fair
	p.ks = e.Cfg.Space.ForMutex(name)
	p.keys = [4]any{&p.ks.Lock, &p.ks.Fence, &p.ks.Queue, &p.ks.Forced}
}

// Keys returns the lock's keys.
func (p *Mutex) Keys() *keys.Set { return &p.ks }

// Kind implements lease.Protocol.
func (p *Mutex) Kind() lease.Kind {
	if p.fair {
		return lease.KindFair
	}
	return lease.KindMutex
}

// Key implements lease.Protocol.
func (p *Mutex) Key() string { return p.ks.Lock }

// Shared implements lease.Protocol.
func (p *Mutex) Shared() bool { return false }

// Fields implements lease.Protocol.
func (p *Mutex) Fields(owner string, _ int) (string, string) { return owner, "" }

// Attempt implements lease.Protocol with acquire.lua.
func (p *Mutex) Attempt(l *lease.Lease, ttl time.Duration, count int, q lease.Queueing) *wire.Call {
	a := &p.e.Args
	if q.Entry == "" && !p.fair {
		// The common call: four arguments, acquire.lua's first branch.
		return scriptAcquire.IntCall(l.Buf(), p.keys[:3], l.FieldArg(), p.e.TTLArg(ttl), count, a.FenceTTLMs)
	}
	var entry any = ""
	if q.Entry != "" {
		entry = q.Entry
	}
	registered := flag(q.Registered)
	if q.Registered && q.Handoff && q.Entry != "" {
		registered = "h" // acquire.lua checks for the hand-off first
	}
	return scriptAcquire.IntCall(l.Buf(), p.keys[:3], l.FieldArg(), p.e.TTLArg(ttl), count, a.FenceTTLMs,
		entry, registered, a.QueueTTLMs, flag(p.fair), a.ClaimMs)
}

// AttemptReply implements lease.Protocol: acquire.lua answers one integer.
// Decoded strictly: a grant is a token of at least 1 (fencing counters start
// at 1), a re-entry a count of at least 1; anything else is an error, never
// a grant.
func (p *Mutex) AttemptReply(cmd redis.Cmder, count int) (lease.Reply, error) {
	v, err := cmd.(*redis.IntCmd).Result()
	switch {
	case err != nil:
		return lease.Reply{}, err
	case v >= 1 && count == 0:
		return lease.Reply{Granted: true, Token: uint64(v), Count: 1}, nil
	case v > 0:
		return lease.Reply{Granted: true, Count: int(v)}, nil
	case v == -1 && count > 0:
		return lease.Reply{Gone: true, Wait: -1}, nil
	case v <= -2:
		return lease.Reply{Wait: msDuration(-3 - v)}, nil
	}
	return lease.Reply{}, fmt.Errorf("dlock: unexpected acquire reply %d", v)
}

// Release implements lease.Protocol with release.lua.
func (p *Mutex) Release(l *lease.Lease, count int, all bool) *wire.Call {
	a := &p.e.Args
	if all {
		return scriptRelease.IntCall(l.Buf(), p.keys[:], l.FieldArg(), count, a.ClaimMs, a.FenceTTLMs, l.Token(), "1")
	}
	return scriptRelease.IntCall(l.Buf(), p.keys[:], l.FieldArg(), count, a.ClaimMs, a.FenceTTLMs, l.Token())
}

// ReleaseReply implements lease.Protocol: release.lua answers one integer,
// decoded as PassReply does; a pass's answer to a release is an error.
func (p *Mutex) ReleaseReply(cmd redis.Cmder) (lease.Released, error) {
	r, token, err := p.PassReply(cmd)
	if err == nil && token != 0 {
		return lease.Released{}, fmt.Errorf("dlock: a release answered as a pass (token %d)", token)
	}
	return r, err
}

// passed is release.lua's PASSED: a pass answers passed - token.
const passed = -16

// passBudget is how many passes in a row a handle makes before a final
// release goes through Redis' queue as any other (lease.Passer): waiters of
// other processes, and Redisson's pollers, which no queue shows, then get
// their turn.
const passBudget = 16

// MayPass implements lease.Passer: up to passBudget passes in a row.
func (p *Mutex) MayPass(inRow int) bool { return inRow < passBudget }

// Spare implements lease.Passer: a Mutex's pass in Redis takes the tokens
// of the passes in memory that may follow it within the budget. A
// FairMutex takes none: each of its passes asks Redis whether another
// process queues.
func (p *Mutex) Spare() int {
	if p.fair {
		return 0
	}
	return passBudget - 1
}

// Pass implements lease.Passer with release.lua's pass. A FairMutex passes
// only while no other process queues, and so keeps its order across
// processes.
func (p *Mutex) Pass(l, next *lease.Lease, ttl time.Duration) *wire.Call {
	a := &p.e.Args
	return scriptRelease.IntCall(l.Buf(), p.keys[:], l.FieldArg(), 1, a.ClaimMs, a.FenceTTLMs, l.Token(), "0",
		next.FieldArg(), p.e.TTLArg(ttl), flag(p.fair), 1+p.Spare())
}

// PassReply implements lease.Passer: release.lua's integer, decoded
// strictly; a pass's highest token is above the spare ones it carries, so
// the next holder's own (top - Spare) is at least 1.
func (p *Mutex) PassReply(cmd redis.Cmder) (lease.Released, uint64, error) {
	v, err := cmd.(*redis.IntCmd).Result()
	switch {
	case err != nil:
		return lease.Released{}, 0, err
	case v >= 0:
		return lease.Released{Found: true, Remaining: int(v)}, 0, nil
	case v >= -1-lease.CodeDataLost:
		return lease.Released{Why: -1 - v}, 0, nil
	case v <= passed-1 && uint64(passed-v) > uint64(p.Spare()):
		return lease.Released{Found: true}, uint64(passed - v), nil
	}
	return lease.Released{}, 0, fmt.Errorf("dlock: unexpected release reply %d", v)
}

// Undo implements lease.Protocol with leave.lua: even without an entry, a
// grant whose reply was lost is this owner's, and leave.lua passes it on.
func (p *Mutex) Undo(ctx context.Context, l *lease.Lease, q lease.Queueing, mayHold bool) {
	if q.Entry == "" && !mayHold {
		return
	}
	a := &p.e.Args
	if err := scriptLeave.Run(ctx, p.e.Wire, p.keys[:3], q.Entry, l.FieldArg(), a.ClaimMs, a.FenceTTLMs).Err(); err != nil {
		p.e.Cfg.Logger.Debug("dlock: leaving the wait queue failed; the entry expires", "name", l.Name(), "err", err)
	}
}

// Channel implements lease.Protocol: Redisson's release channel.
func (p *Mutex) Channel() (string, bool) {
	p.channelOnce.Do(func() { p.ks.Channel = modeChannel(p.e, p.e.Cfg.Space.LockChannel(p.name), p.ks.Lock) })
	return p.ks.Channel, false
}

// Entry implements lease.Protocol: every waiter queues for a hand-off, but
// a polling Mutex (ticket 0) only when the lock is fair.
func (p *Mutex) Entry(ticket uint64, ttl time.Duration, l *lease.Lease) string {
	if ticket == 0 && !p.fair {
		return ""
	}
	return keys.MutexEntry(ticket, lease.Ms(ttl), l.Field())
}

// PopEntry implements lease.Popper: keys.PopEntry, and the box next to the
// lock's queue.
func (p *Mutex) PopEntry(ticket uint64, ttl time.Duration, l *lease.Lease) (string, string) {
	return keys.PopEntry(ticket, lease.Ms(ttl), l.Field()), keys.GrantBox(p.ks.Queue, l.Field())
}

// Fenced implements lease.Popper: a hand-off carries the holder's token.
func (p *Mutex) Fenced() bool { return true }

// Renewal implements lease.Protocol.
func (p *Mutex) Renewal(l *lease.Lease) renew.Entry {
	return renew.Entry{Key: p.ks.Lock, Field: l.Field(), Kind: 'm', Fence: p.ks.Fence, Forced: p.ks.Forced, Token: l.Token()}
}

// Force releases the lock whoever holds it, passes it to the next waiter
// and tells the evicted owners; it reports whether the lock was held. A
// key that is not a lock (force.lua decides, atomically) is left as it is,
// with an error wrapping lease.ErrNotLock.
func (p *Mutex) Force(ctx context.Context) (bool, error) {
	a := &p.e.Args
	keys := []any{p.ks.Lock, p.ks.Fence, p.ks.Queue, p.ks.Forced}
	n, _, err := wire.Go(p.e.Wire, ctx, func(ctx context.Context) (int64, error) {
		if err := p.notTenants(ctx); err != nil {
			return 0, err
		}
		return scriptForce.Run(ctx, p.e.Wire, keys, a.ClaimMs, a.FenceTTLMs).Int64()
	}, nil)
	switch {
	case err != nil:
		return false, err
	case n == forceNotHash:
		return false, fmt.Errorf("%w: %q is another Redis type than a hash; left as it is", lease.ErrNotLock, p.name)
	case n == forceNotLock:
		return false, fmt.Errorf("%w: %q is a hash whose fields are not a lock's (owners with hold counts); left as it is", lease.ErrNotLock, p.name)
	}
	return n == 1, nil
}

// notTenants refuses to force, from a Client without a namespace, a name
// "ns:rest" that namespace ns's Client uses as its lock rest (its fencing
// counter exists): the hash is the same key, but the holder would not be
// told (its forced set and channel are the tenant's), its queue would not
// be served, and a later grant here would take a token from another
// counter than the tenant's, below tokens the tenant already issued.
func (p *Mutex) notTenants(ctx context.Context) error {
	if p.e.Cfg.Space.Prefix() != "" {
		return nil
	}
	ns, fence, ok := keys.TenantFence(p.name)
	if !ok {
		return nil
	}
	n, err := p.e.Wire.Redis().Exists(ctx, fence).Result()
	switch {
	case err != nil:
		return err
	case n > 0:
		return fmt.Errorf("%w: %q is the lock %q of namespace %q (%s exists): force it with a Client of that namespace (WithNamespace, the CLI's --namespace)",
			lease.ErrInvalidArgument, p.name, strings.TrimPrefix(p.name, ns+":"), ns, fence)
	}
	return nil
}

// force.lua's replies for a key that is not a lock (NOT_HASH, NOT_LOCK).
const (
	forceNotHash = -1
	forceNotLock = -2
)

// msDuration is a script's millisecond count as a duration, or -1 when the
// script said "unknown" (a negative count).
func msDuration(n int64) time.Duration {
	if n < 0 {
		return -1
	}
	return time.Duration(n) * time.Millisecond
}

// scriptRaiseFence lifts a fencing counter to at least ARGV[1], keeping its
// TTL (and so the start of its sequence).
var scriptRaiseFence = script(`
local c = redis.call('get', KEYS[1])
if c and tonumber(c) < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1], 'KEEPTTL')
  return 1
end
return 0`)

// RaiseFence lifts the fencing counter of the lock name to at least tok,
// so that Redis's next token is above one another tier issued.
func RaiseFence(ctx context.Context, e *lease.Engine, name string, tok uint64) error {
	fence := e.Cfg.Space.For(name).Fence
	_, _, err := wire.Go(e.Wire, ctx, func(ctx context.Context) (int64, error) {
		return scriptRaiseFence.Run(ctx, e.Wire, []any{fence}, tok).Int64()
	}, nil)
	return err
}

// IsLocked reports whether any owner holds the lock. It returns ctx's cause
// once ctx is done.
func (p *Mutex) IsLocked(ctx context.Context) (bool, error) {
	n, _, err := wire.Go(p.e.Wire, ctx, func(ctx context.Context) (int64, error) {
		return p.e.Redis().Exists(ctx, p.ks.Lock).Result()
	}, nil)
	return n == 1, err
}

// HoldCount returns the count of the owner field in the lock (0 when it is
// not there).
func (p *Mutex) HoldCount(ctx context.Context, field string) (int, error) {
	n, _, err := wire.Go(p.e.Wire, ctx, func(ctx context.Context) (int, error) {
		return p.e.Redis().HGet(ctx, p.ks.Lock, field).Int()
	}, nil)
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// RemainingTTL returns the lock's remaining TTL, 0 when it is not held.
func (p *Mutex) RemainingTTL(ctx context.Context) (time.Duration, error) {
	d, _, err := wire.Go(p.e.Wire, ctx, func(ctx context.Context) (time.Duration, error) {
		return p.e.Redis().PTTL(ctx, p.ks.Lock).Result()
	}, nil)
	if err != nil || d < 0 {
		return 0, err
	}
	return d, nil
}
