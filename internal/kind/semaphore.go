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
	//go:embed sem_lib.lua
	luaSemLib string
	//go:embed sem_acquire.lua
	luaSemAcquire string
	//go:embed sem_release.lua
	luaSemRelease string
	//go:embed sem_leave.lua
	luaSemLeave string

	scriptSemAcquire = script(luaSemLib + luaSemAcquire)
	scriptSemRelease = script(luaSemLib + luaSemRelease)
	scriptSemLeave   = script(luaSemLib + luaSemLeave)
)

// semMismatch is sem_acquire.lua's answer when the semaphore is live with
// another number of permits.
const semMismatch = -3

// Semaphore is the protocol of a semaphore's permits (Redisson's
// RPermitExpirableSemaphore, with dlock's queue for a direct hand-off). A
// permit is a lease whose owner id is the permit id. One Semaphore serves
// one handle.
type Semaphore struct {
	e    *lease.Engine
	name string
	n    int
	ks   keys.SemaphoreSet
	keys []any
}

// Init prepares p for the semaphore name of n permits on e. name must be
// valid and n positive.
func (p *Semaphore) Init(e *lease.Engine, name string, n int) {
	p.e, p.name, p.n = e, name, n
	p.ks = keys.Semaphore(name)
	p.keys = []any{p.ks.Permits, p.ks.Size, p.ks.Queue}
}

// Keys returns the semaphore's keys.
func (p *Semaphore) Keys() *keys.SemaphoreSet { return &p.ks }

// Kind implements lease.Protocol.
func (p *Semaphore) Kind() lease.Kind { return lease.KindSemaphore }

// Key implements lease.Protocol.
func (p *Semaphore) Key() string { return p.ks.Permits }

// Shared implements lease.Protocol: one handle takes many permits at once.
func (p *Semaphore) Shared() bool { return true }

// Fields implements lease.Protocol: the permit id is the owner.
func (p *Semaphore) Fields(owner string) (string, string) { return owner, "" }

// Attempt implements lease.Protocol with sem_acquire.lua. Permits are not
// reentrant: count is always 0.
func (p *Semaphore) Attempt(l *lease.Lease, ttl time.Duration, _ int, q lease.Queueing) *wire.Call {
	a := &p.e.Args
	return wire.NewCall(scriptSemAcquire.Cmd(p.keys, l.FieldArg(), p.n, lease.Ms(ttl), q.Entry, a.QueueTTLMs, a.ClaimMs), scriptSemAcquire)
}

// AttemptReply implements lease.Protocol: {1, ttl} held, {0, ms until the
// first permit expires (-1: none)}, {-3, size} another number of permits.
func (p *Semaphore) AttemptReply(cmd redis.Cmder, _ int) (lease.Reply, error) {
	var buf [2]int64
	v, err := ints(cmd.(*redis.Cmd), buf[:])
	switch {
	case err != nil:
		return lease.Reply{}, err
	case len(v) == 2 && v[0] == 1:
		return lease.Reply{Granted: true, Count: 1}, nil
	case len(v) == 2 && v[0] == 0 && v[1] >= 0:
		return lease.Reply{Wait: time.Duration(v[1])*time.Millisecond + time.Millisecond}, nil
	case len(v) == 2 && v[0] == 0:
		return lease.Reply{Wait: -1}, nil
	case len(v) == 2 && v[0] == semMismatch:
		return lease.Reply{}, fmt.Errorf("%w: semaphore %q has %d permits while it has holders or waiters, not %d",
			lease.ErrInvalidArgument, p.name, v[1], p.n)
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

// Renewal implements lease.Protocol: a permit's expiry in the sorted set.
func (p *Semaphore) Renewal(l *lease.Lease) renew.Entry {
	return renew.Entry{Key: p.ks.Permits, Set: p.ks.Size, Field: l.Field(), Kind: 's'}
}
