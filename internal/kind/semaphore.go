package kind

import (
	"context"
	_ "embed"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

var (
	//go:embed sem_lib.lua
	luaSemLib string
	// luaSem is what every semaphore script is given: the migration
	// helpers, then sem_lib.lua.
	luaSem = luaMigrating + luaSemLib
	//go:embed sem_acquire.lua
	luaSemAcquire string
	//go:embed sem_release.lua
	luaSemRelease string
	//go:embed sem_leave.lua
	luaSemLeave string
	//go:embed sem_resize.lua
	luaSemResize string
	//go:embed sem_available.lua
	luaSemAvailable string

	scriptSemAcquire   = script(luaSem + luaSemAcquire)
	scriptSemRelease   = script(luaSem + luaSemRelease)
	scriptSemLeave     = script(luaSem + luaSemLeave)
	scriptSemResize    = script(luaSem + luaSemResize)
	scriptSemAvailable = script(luaSem + luaSemAvailable)
)

// semTooMany is sem_acquire.lua's answer when a permit asks for more
// permits than the semaphore has.
const semTooMany = -3

// Semaphore is the protocol of a semaphore's permits (Redisson's
// RPermitExpirableSemaphore, with dlock's queue for a direct hand-off). A
// permit is a lease whose field is its permit id: the owner, with the
// lease's weight (its number of permits) appended when more than one
// (keys.PermitID). One Semaphore serves one handle.
type Semaphore struct {
	e    *lease.Engine
	name string
	n    atomic.Int64 // the size the handle gives a semaphore that does not exist yet
	ks   keys.SemaphoreSet
	keys []any
}

// Init prepares p for the semaphore name of n permits on e. name must be
// valid and n positive.
func (p *Semaphore) Init(e *lease.Engine, name string, n int) {
	p.e, p.name = e, name
	p.n.Store(int64(n))
	p.ks = e.Cfg.Space.Semaphore(name)
	p.ks.Free = modeChannel(e, p.ks.Free, p.ks.Permits)
	p.keys = []any{p.ks.Permits, p.ks.Size, p.ks.Queue, p.ks.Seen}
}

// Size is the handle's size: the one it was made with, or the last one it
// set (SetPermits).
func (p *Semaphore) Size() int { return int(p.n.Load()) }

// Keys returns the semaphore's keys.
func (p *Semaphore) Keys() *keys.SemaphoreSet { return &p.ks }

// Kind implements lease.Protocol.
func (p *Semaphore) Kind() lease.Kind { return lease.KindSemaphore }

// Key implements lease.Protocol.
func (p *Semaphore) Key() string { return p.ks.Permits }

// Shared implements lease.Protocol: one handle takes many permits at once.
func (p *Semaphore) Shared() bool { return true }

// Fields implements lease.Protocol: the permit id is the owner and, for
// more than one permit, their number.
func (p *Semaphore) Fields(owner string, n int) (string, string) { return keys.PermitID(owner, n), "" }

// Attempt implements lease.Protocol with sem_acquire.lua. Permits are not
// reentrant: count is always 0. The entry's standing picks the script's
// common cases: a new entry queues behind others without reading the
// permits, and the attempt after a hand-off message checks for its permit
// first (the script still decides from what Redis holds).
func (p *Semaphore) Attempt(l *lease.Lease, ttl time.Duration, _ int, q lease.Queueing) *wire.Call {
	a := &p.e.Args
	standing := flag(q.Registered)
	if q.Registered && q.Handoff {
		standing = "h"
	}
	return wire.NewCall(scriptSemAcquire.Cmd(p.keys, l.FieldArg(), p.n.Load(), lease.Ms(ttl), q.Entry, a.QueueTTLMs, a.ClaimMs, standing), scriptSemAcquire)
}

// AttemptReply implements lease.Protocol: {1, ttl} held, {0, ms until the
// first permit expires (-1: none)}, {-3, size} more permits asked for
// than the semaphore has. A grant's TTL is at least 1 ms; anything else is
// an error, never a grant.
func (p *Semaphore) AttemptReply(cmd redis.Cmder, _ int) (lease.Reply, error) {
	var buf [2]int64
	v, err := ints(cmd.(*redis.Cmd), buf[:])
	switch {
	case err != nil:
		return lease.Reply{}, err
	case len(v) == 2 && v[0] == 1 && v[1] >= 1:
		return lease.Reply{Granted: true, Count: 1}, nil
	case len(v) == 2 && v[0] == 0 && v[1] >= 0:
		return lease.Reply{Wait: time.Duration(v[1])*time.Millisecond + time.Millisecond}, nil
	case len(v) == 2 && v[0] == 0:
		return lease.Reply{Wait: -1}, nil
	case len(v) == 2 && v[0] == semTooMany:
		return lease.Reply{}, fmt.Errorf("%w: semaphore %q has %d permits, fewer than asked for",
			lease.ErrInvalidArgument, p.name, v[1])
	}
	return lease.Reply{}, fmt.Errorf("dlock: unexpected semaphore reply %v", v)
}

// Release implements lease.Protocol with sem_release.lua.
func (p *Semaphore) Release(l *lease.Lease, _ int, _ bool) *wire.Call {
	return wire.NewCall(scriptSemRelease.Cmd(p.keys, l.FieldArg(), p.e.Args.ClaimMs, p.ks.Free), scriptSemRelease)
}

// ReleaseReply implements lease.Protocol: {1} released, {0} gone.
func (p *Semaphore) ReleaseReply(cmd redis.Cmder) (lease.Released, error) {
	var buf [1]int64
	v, err := ints(cmd.(*redis.Cmd), buf[:])
	switch {
	case err != nil:
		return lease.Released{}, err
	case len(v) == 1 && v[0] == 1:
		return lease.Released{Found: true}, nil
	case len(v) == 1 && v[0] == 0:
		return lease.Released{Why: lease.CodeGone}, nil
	}
	return lease.Released{}, fmt.Errorf("dlock: unexpected semaphore release reply %v", v)
}

// Undo implements lease.Protocol with sem_leave.lua, which leaves the queue
// and gives back a permit granted (or handed over) with the reply lost.
func (p *Semaphore) Undo(ctx context.Context, l *lease.Lease, q lease.Queueing, _ bool) {
	if err := scriptSemLeave.Run(ctx, p.e.Wire, p.keys, q.Entry, l.FieldArg(), p.e.Args.ClaimMs).Err(); err != nil {
		p.e.Cfg.Logger.Debug("dlock: leaving a semaphore's queue failed; the entry expires", "name", p.name, "err", err)
	}
}

// Channel implements lease.Protocol: "0" there means a permit was freed
// with nobody queued.
func (p *Semaphore) Channel() (string, bool) { return p.ks.Free, false }

// Entry implements lease.Protocol: every waiter queues.
func (p *Semaphore) Entry(ticket uint64, ttl time.Duration, l *lease.Lease) string {
	return keys.QueueEntry(ticket, lease.Ms(ttl), l.Field())
}

// PopEntry implements lease.Popper: keys.PopEntry for the permit id, and
// the box next to the semaphore's queue, where sem_lib.lua's grant_queued
// puts "0 <claim ms>" (a permit carries no token).
func (p *Semaphore) PopEntry(ticket uint64, ttl time.Duration, l *lease.Lease) (string, string) {
	return keys.PopEntry(ticket, lease.Ms(ttl), l.Field()), keys.GrantBox(p.ks.Queue, l.Field())
}

// Fenced implements lease.Popper: permits carry no fencing token.
func (p *Semaphore) Fenced() bool { return false }

// Renewal implements lease.Protocol: a permit's expiry in the sorted set.
func (p *Semaphore) Renewal(l *lease.Lease) renew.Entry {
	return renew.Entry{Key: p.ks.Permits, Set: p.ks.Size, Field: l.Field(), Kind: 's'}
}

// SetPermits sets the semaphore's size to n (positive) with sem_resize.lua,
// and makes n the handle's size.
func (p *Semaphore) SetPermits(ctx context.Context, n int) error {
	a := &p.e.Args
	if err := scriptSemResize.Run(ctx, p.e.Wire, p.keys, n, a.QueueTTLMs, a.ClaimMs).Err(); err != nil {
		return p.e.WrapClosed(err)
	}
	p.n.Store(int64(n))
	return nil
}

// Available returns the semaphore's free permits (never below 0) with
// sem_available.lua: its size, or the handle's when it does not exist,
// less the permits held.
func (p *Semaphore) Available(ctx context.Context) (int, error) {
	var buf [2]int64
	v, err := ints(scriptSemAvailable.Run(ctx, p.e.Wire, p.keys, p.n.Load()), buf[:])
	switch {
	case err != nil:
		return 0, p.e.WrapClosed(err)
	case len(v) != 2:
		return 0, fmt.Errorf("dlock: unexpected semaphore reply %v", v)
	}
	return int(max(v[0]-v[1], 0)), nil
}
