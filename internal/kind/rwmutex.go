package kind

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

var (
	//go:embed rwlib.lua
	luaRWLib string
	//go:embed rwlock.lua
	luaRWLock string
	//go:embed rlock.lua
	luaRLock string
	//go:embed rwunlock.lua
	luaRWUnlock string
	//go:embed rwleave.lua
	luaRWLeave string

	// Read-write lock scripts: lib.lua, then rwlib.lua, then the script.
	scriptRWLock   = script(wire.WithLib(luaLib+luaRWLib, luaRWLock))
	scriptRLock    = script(wire.WithLib(luaLib+luaRWLib, luaRLock))
	scriptRWUnlock = script(wire.WithLib(luaLib+luaRWLib, luaRWUnlock))
	scriptRWLeave  = script(wire.WithLib(luaLib+luaRWLib, luaRWLeave))
)

// RWMutex is the read-write lock's protocol, Redisson's RReadWriteLock
// hash: Write is its write side, Read its read side. Both sides of one
// handle share the keys.
type RWMutex struct {
	e    *lease.Engine
	ks   keys.Set
	keys [5]any // the scripts' keys, boxed once

	Write Write
	Read  Read
}

// Write is the write side of an RWMutex: waiting writers register so that
// new readers hold back.
type Write struct{ rw *RWMutex }

// Read is the read side of an RWMutex: a field per reader in the same hash,
// and a deadline per reader by the server's clock.
type Read struct{ rw *RWMutex }

// Init prepares p for the lock name on e. name must be valid.
func (p *RWMutex) Init(e *lease.Engine, name string) {
	p.e = e
	p.ks = e.Cfg.Space.For(name)
	p.ks.Channel = modeChannel(e, p.ks.Channel, p.ks.Lock)
	p.ks.RWChannel = modeChannel(e, p.ks.RWChannel, p.ks.Lock)
	p.keys = [5]any{&p.ks.Lock, &p.ks.Fence, &p.ks.Readers, &p.ks.Writers, &p.ks.Forced}
	p.Write.rw, p.Read.rw = p, p
}

// Keys returns the lock's keys.
func (p *RWMutex) Keys() *keys.Set { return &p.ks }

// rwReply decodes rwlock.lua's and rlock.lua's arrays: {1, count, token}
// held, {0, ms to wait} not, {-1} the re-entered hold is gone, {-2} an
// upgrade. Decoded strictly: a grant has a count of at least 1 and, for a
// new hold (count 0), a token of at least 1; anything else is an error.
func rwReply(cmd redis.Cmder, count int) (lease.Reply, error) {
	var buf [3]int64
	v, err := ints(cmd.(*redis.Cmd), buf[:])
	switch {
	case err != nil:
		return lease.Reply{}, err
	case len(v) == 3 && v[0] == 1 && v[1] >= 1 && (count > 0 || v[2] >= 1):
		return lease.Reply{Granted: true, Count: int(v[1]), Token: uint64(v[2])}, nil
	case len(v) == 2 && v[0] == 0:
		return lease.Reply{Wait: msDuration(v[1])}, nil
	case len(v) == 1 && v[0] == -1 && count > 0:
		return lease.Reply{Gone: true, Wait: -1}, nil
	case len(v) == 1 && v[0] == -2:
		return lease.Reply{}, lease.ErrUpgrade
	}
	return lease.Reply{}, fmt.Errorf("dlock: unexpected acquire reply %v", v)
}

// releaseReply decodes rwunlock.lua's {1, remaining} or {0, why}.
func (p *RWMutex) releaseReply(cmd redis.Cmder) (lease.Released, error) {
	var buf [2]int64
	v, err := ints(cmd.(*redis.Cmd), buf[:])
	switch {
	case err != nil:
		return lease.Released{}, err
	case len(v) == 2 && v[0] == 1:
		return lease.Released{Found: true, Remaining: int(v[1])}, nil
	case len(v) == 2 && v[0] == 0:
		return lease.Released{Why: v[1]}, nil
	}
	return lease.Released{}, fmt.Errorf("dlock: unexpected release reply %v", v)
}

func (p *RWMutex) release(l *lease.Lease, count int, all bool, side string) *wire.Call {
	return wire.NewCall(scriptRWUnlock.Cmd(p.keys[:], l.FieldArg(), count, flag(all), side, l.Token(), p.e.Args.FenceTTLMs), scriptRWUnlock)
}

// giveBack releases a grant whose reply was lost.
func (p *RWMutex) giveBack(ctx context.Context, l *lease.Lease, mayHold bool) {
	if !mayHold {
		return
	}
	if _, err := l.ReleaseNow(ctx, 1, true); err != nil {
		p.e.Cfg.Logger.Debug("dlock: giving back an unclaimed grant failed; it expires", "name", l.Name(), "err", err)
	}
}

func (p *RWMutex) renewal(l *lease.Lease, kind byte, set string) renew.Entry {
	return renew.Entry{Key: p.ks.Lock, Set: set, Field: l.Field(), Kind: kind, Fence: p.ks.Fence, Forced: p.ks.Forced, Token: l.Token()}
}

// Kind implements lease.Protocol.
func (w *Write) Kind() lease.Kind { return lease.KindWrite }

// Key implements lease.Protocol.
func (w *Write) Key() string { return w.rw.ks.Lock }

// Shared implements lease.Protocol.
func (w *Write) Shared() bool { return false }

// Fields implements lease.Protocol: the write field is the owner's with
// ":write".
func (w *Write) Fields(owner string, _ int) (string, string) { return owner + ":write", "" }

// Attempt implements lease.Protocol with rwlock.lua.
func (w *Write) Attempt(l *lease.Lease, ttl time.Duration, count int, q lease.Queueing) *wire.Call {
	p := w.rw
	var waitMs any = "0"
	if q.Entry != "" {
		waitMs = p.e.Args.WriterWaitMs
	}
	return wire.NewCall(scriptRWLock.Cmd(p.keys[:], l.OwnerArg(), l.FieldArg(), p.e.TTLArg(ttl), count, waitMs, p.e.Args.FenceTTLMs), scriptRWLock)
}

// AttemptReply implements lease.Protocol.
func (w *Write) AttemptReply(cmd redis.Cmder, count int) (lease.Reply, error) {
	return rwReply(cmd, count)
}

// Release implements lease.Protocol.
func (w *Write) Release(l *lease.Lease, count int, all bool) *wire.Call {
	return w.rw.release(l, count, all, "w")
}

// ReleaseReply implements lease.Protocol.
func (w *Write) ReleaseReply(cmd redis.Cmder) (lease.Released, error) { return w.rw.releaseReply(cmd) }

// Undo implements lease.Protocol: a lost grant is given back, then the
// writer stops holding readers back (rwleave.lua).
func (w *Write) Undo(ctx context.Context, l *lease.Lease, q lease.Queueing, mayHold bool) {
	p := w.rw
	p.giveBack(ctx, l, mayHold)
	if q.Entry == "" && !mayHold {
		return
	}
	if err := scriptRWLeave.Run(ctx, p.e.Wire, p.keys[:], l.OwnerArg()).Err(); err != nil {
		p.e.Cfg.Logger.Debug("dlock: leaving the wait queue failed; the entry expires", "name", l.Name(), "err", err)
	}
}

// Channel implements lease.Protocol: Redisson's read-write lock channel.
func (w *Write) Channel() (string, bool) { return w.rw.ks.RWChannel, false }

// Entry implements lease.Protocol: a waiting writer registers ("w").
func (w *Write) Entry(uint64, time.Duration, *lease.Lease) string { return "w" }

// Renewal implements lease.Protocol.
// The read-deadline set goes along: once the writer downgraded, its own
// deadline is kept there (rlock.lua), and renewal moves it.
func (w *Write) Renewal(l *lease.Lease) renew.Entry { return w.rw.renewal(l, 'w', w.rw.ks.Readers) }

// Kind implements lease.Protocol.
func (r *Read) Kind() lease.Kind { return lease.KindRead }

// Key implements lease.Protocol.
func (r *Read) Key() string { return r.rw.ks.Lock }

// Shared implements lease.Protocol.
func (r *Read) Shared() bool { return true }

// Fields implements lease.Protocol: the read field is the owner; the extra
// argument is its would-be write field, for rlock.lua's downgrade check.
func (r *Read) Fields(owner string, _ int) (string, string) { return owner, owner + ":write" }

// Attempt implements lease.Protocol with rlock.lua.
func (r *Read) Attempt(l *lease.Lease, ttl time.Duration, count int, _ lease.Queueing) *wire.Call {
	p := r.rw
	return wire.NewCall(scriptRLock.Cmd(p.keys[:], l.FieldArg(), l.ExtraArg(), p.e.TTLArg(ttl), count, p.e.Args.FenceTTLMs), scriptRLock)
}

// AttemptReply implements lease.Protocol.
func (r *Read) AttemptReply(cmd redis.Cmder, count int) (lease.Reply, error) {
	return rwReply(cmd, count)
}

// Release implements lease.Protocol.
func (r *Read) Release(l *lease.Lease, count int, all bool) *wire.Call {
	return r.rw.release(l, count, all, "r")
}

// ReleaseReply implements lease.Protocol.
func (r *Read) ReleaseReply(cmd redis.Cmder) (lease.Released, error) { return r.rw.releaseReply(cmd) }

// Undo implements lease.Protocol: readers never queue; a lost grant is
// given back.
func (r *Read) Undo(ctx context.Context, l *lease.Lease, _ lease.Queueing, mayHold bool) {
	r.rw.giveBack(ctx, l, mayHold)
}

// Channel implements lease.Protocol: readers wait to share the lock.
func (r *Read) Channel() (string, bool) { return r.rw.ks.RWChannel, true }

// Entry implements lease.Protocol: readers do not queue.
func (r *Read) Entry(uint64, time.Duration, *lease.Lease) string { return "" }

// Renewal implements lease.Protocol: a reader renews its own deadline in
// the readers' set.
func (r *Read) Renewal(l *lease.Lease) renew.Entry { return r.rw.renewal(l, 'r', r.rw.ks.Readers) }
