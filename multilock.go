package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// MultiLock takes several locks as one, all or nothing, Redisson's RMultiLock.
// Its members are any of dlock's named lockers: *Mutex, *FairMutex, *RWMutex
// (its write side) and RWMutex.RLocker() (its read side), in any mix.
//
// # Guarantees
//
//   - Sorted order: members are always taken in ascending name order,
//     whatever order they were passed in, and released in the reverse order.
//     Two MultiLocks over overlapping sets ({A,B} and {B,A}) therefore never
//     deadlock each other: the classic ordered-locking rule, applied for you.
//   - All or nothing: when a member cannot be taken (the wait ran out, ctx was
//     cancelled, Redis failed), the members already taken are released before
//     TryLock or Lock returns; it never returns holding some of them.
//   - One wait budget: TryLock's wait covers the whole acquisition; each
//     member gets what is left of it (at least one attempt each). Giving
//     back what it took after a failure adds at most 100ms;
//     a release not confirmed by then goes on in the background.
//   - No cross-slot script: each member is taken by its own script call, so
//     members may live in different Redis Cluster slots.
//
// Each member keeps its own renewal, fencing token and loss signal (ask the
// member); LockContext and TryLockContext return one context that carries
// every member's hold and ends as soon as any of them ends. With a lease, each member's lease starts at its own grant.
// Holding taken members while waiting for the next is safe because of the
// sorted order; it is not all-at-once atomic: another process may see some
// members held for a moment before this one gives them back.
//
// MultiLock keeps no Redis state of its own, and no state beyond its members:
// a MultiLock is safe for concurrent use, and goroutines sharing one wait for
// each other at its members' handles (see Mutex).
type MultiLock struct {
	c       *Client
	name    string // the members' names, sorted, joined by ","
	members []Member
	err     error // bad construction, reported by every call
}

// MultiLock returns a lock over locks, taken all or nothing in sorted name
// order. Each member must be a lock handle of this or another Client, with a
// distinct name and Redis key. Bad members (none, nil, an invalid or
// repeated name, a repeated key) are reported with ErrInvalidArgument by
// the first call, before any network call. Each call returns a new
// MultiLock; its members are the handles given. Safe for concurrent use.
func (c *Client) MultiLock(locks ...Member) *MultiLock {
	ml := &MultiLock{c: c}
	if len(locks) == 0 {
		ml.err = fmt.Errorf("%w: a MultiLock needs at least one lock", ErrInvalidArgument)
		return ml
	}
	ml.members = make([]Member, 0, len(locks))
	for i, l := range locks {
		if l == nil || l.member() == nil {
			ml.err = fmt.Errorf("%w: MultiLock member %d is nil", ErrInvalidArgument, i)
			return ml
		}
		if err := l.member().NameErr(); err != nil {
			ml.err = fmt.Errorf("%w: MultiLock member %d: %w", ErrInvalidArgument, i, err)
			return ml
		}
		ml.members = append(ml.members, l)
	}
	// Names are passed without the Client's namespace: two members of
	// different names may still be one lock (a namespaced Client's "x" and
	// a plain Client's "ns:x"), which the second would wait for for good.
	byKey := make(map[string]string, len(ml.members))
	for _, m := range ml.members {
		k := m.member().Key()
		if other, ok := byKey[k]; ok && other != m.Name() {
			ml.err = fmt.Errorf("%w: MultiLock members %q and %q are one Redis key, %q", ErrInvalidArgument, other, m.Name(), k)
			return ml
		}
		byKey[k] = m.Name()
	}
	slices.SortStableFunc(ml.members, func(a, b Member) int { return strings.Compare(a.Name(), b.Name()) })
	names := make([]string, len(ml.members))
	for i, m := range ml.members {
		names[i] = m.Name()
		if i > 0 && names[i] == names[i-1] {
			ml.err = fmt.Errorf("%w: MultiLock has %q twice", ErrInvalidArgument, names[i])
			return ml
		}
	}
	ml.name = strings.Join(names, ",")
	return ml
}

// Names returns the members' names in the order they are taken.
func (ml *MultiLock) Names() []string {
	out := make([]string, len(ml.members))
	for i, m := range ml.members {
		out[i] = m.Name()
	}
	return out
}

func (ml *MultiLock) check(ctx context.Context, lease time.Duration) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case ml.err != nil:
		return ml.err
	case lease > 0 && lease < time.Millisecond:
		return fmt.Errorf("%w: lease %v is below Redis' 1ms resolution", ErrInvalidArgument, lease)
	case ml.c.e.Closed():
		return ErrClosed
	}
	// Each member's own Client may be closed: told before any member is
	// taken over the network.
	for _, m := range ml.members {
		if err := m.member().Check(ctx, lease); err != nil {
			return err
		}
	}
	return nil
}

// TryLock takes every member, waiting up to wait in all; see Mutex.TryLock
// for wait and lease. It returns (false, nil) when the wait ran out, having
// released whatever it took, and an error wrapping ErrLockLost, having
// released the rest, when a member taken was lost before the last was.
func (ml *MultiLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	_, ok, err := ml.acquire(ctx, request(wait, lease), false)
	return ok, err
}

// Lock takes every member in watchdog mode, waiting as long as it takes or
// until ctx is done (then it releases whatever it took and returns ctx's
// error).
func (ml *MultiLock) Lock(ctx context.Context) error {
	_, _, err := ml.acquire(ctx, lease.Request{Forever: true}, false)
	return err
}

// LockContext is Lock returning a context that carries every member's hold
// (TokenFrom gives the last member's token; each member's own is its
// handle's) and is cancelled, with that hold's cause, as soon as any member's
// hold ends: lost (ErrLockLost), or released. Unlock with it releases
// exactly those holds, each confirmed (the last member's release, which
// ends the context, does not leave the others' to the background). While
// a member is awaited, the holds already taken end the wait when one of
// them is lost.
func (ml *MultiLock) LockContext(ctx context.Context) (context.Context, error) {
	hctx, _, err := ml.acquire(ctx, lease.Request{Forever: true}, true)
	return hctx, err
}

// TryLockContext is TryLock returning the context LockContext does; when
// the wait runs out it returns an error wrapping ErrWaitTimeout, having
// released whatever it took.
func (ml *MultiLock) TryLockContext(ctx context.Context, wait, lease time.Duration) (context.Context, error) {
	hctx, ok, err := ml.acquire(ctx, request(wait, lease), true)
	if !ok && err == nil {
		err = fmt.Errorf("%w: %q not acquired within %v", ErrWaitTimeout, ml.name, wait)
	}
	return hctx, err
}

// acquire takes the members in order, all or nothing, within one wait
// budget. With chain, each is taken with the context of the holds before it
// (holdContext), and the last one, which carries them all and ends with any
// of them, is returned.
func (ml *MultiLock) acquire(ctx context.Context, req lease.Request, chain bool) (hctx context.Context, ok bool, err error) {
	if err := ml.check(ctx, req.Lease); err != nil {
		return nil, false, err
	}
	start := time.Now()
	if finish := lease.ObserveAcquire(ml.c.cfg.Observers, ctx, lease.KindMulti, ml.name); finish != nil {
		defer func() {
			finish(lease.Acquisition{Kind: lease.KindMulti, Name: ml.name, Acquired: ok, TimedOut: !ok && err == nil && (req.Forever || req.Wait > 0),
				Err: err, Waited: time.Since(start), Weight: 1})
		}()
	}
	deadline := start.Add(req.Wait)
	hctx = ctx
	var held []context.Context // with chain: the context of each hold taken
	got := make([]*lease.Lease, 0, len(ml.members))
	for i, m := range ml.members {
		r := req
		if !r.Forever && r.Wait > 0 {
			r.Wait = max(time.Until(deadline), 0) // at least one attempt each
		}
		h, err := m.member().Acquire(hctx, r)
		if err != nil || h == nil {
			if rerr := ml.release(ctx, ml.members[:i], held, !req.Forever); rerr != nil && err == nil {
				err = rerr
			}
			return nil, false, err
		}
		if chain {
			hctx = holdContext(hctx, m.member(), h)
			held = append(held, hctx)
		}
		got = append(got, h)
	}
	// A member lost while a later one was awaited (Lock and TryLock return
	// no context to say so) is not held: the caller would work beside its
	// new holder. The whole is given back and the loss answered.
	for _, h := range got {
		if lerr := h.Err(); lerr != nil {
			_ = ml.release(ctx, ml.members, held, !req.Forever)
			return nil, false, publicErr(lerr)
		}
	}
	return hctx, true, nil
}

// Unlock releases one hold of every member, in reverse order, and returns
// their errors joined (ErrNotHeld for members not held).
func (ml *MultiLock) Unlock(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if ml.err != nil {
		return ml.err
	}
	var final func(lease.Release)
	if len(ml.c.cfg.Observers) > 0 {
		final = lease.ObserveRelease(ml.c.cfg.Observers, ctx, lease.KindMulti, ml.name)
	}
	var errs []error
	c := ctx
	for i := len(ml.members) - 1; i >= 0; i-- {
		hd := ml.members[i].member()
		h := lease.From(c, hd.Engine(), hd.Name())
		if err := ml.members[i].Unlock(c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ml.members[i].Name(), err))
		}
		if i > 0 && h != nil {
			var cancel context.CancelFunc
			c, cancel = ml.afterRelease(c, h, ml.members[i-1].member())
			defer cancel()
		}
	}
	err := errors.Join(errs...)
	if final != nil {
		// Final only when the members were held: a second Unlock (every
		// member ErrNotHeld) released nothing.
		final(lease.Release{Kind: lease.KindMulti, Name: ml.name, Final: !errors.Is(err, ErrNotHeld), Err: err, Weight: 1})
	}
	return err
}

// afterRelease is the context Unlock releases the member before h's
// with, once h, which c carries, was released with c. The context
// LockContext returns ends with the release of the hold it was made for,
// the last member's: a release of a member before it with that context
// would go on in the background and answer an error. When h's release
// ended c, and the context h was taken with carries prev's hold, that one
// is used instead: it ends with the caller's ctx, not with this release
// (bounded by c's deadline as well).
func (ml *MultiLock) afterRelease(c context.Context, h *lease.Lease, prev *lease.Handle) (context.Context, context.CancelFunc) {
	p, held := h.Parent(), lease.From(c, prev.Engine(), prev.Name())
	if c.Err() == nil || !errors.Is(context.Cause(c), lease.ErrReleased) || p == nil || p.Err() != nil ||
		held == nil || lease.From(p, prev.Engine(), prev.Name()) != held {
		return c, func() {}
	}
	if d, ok := c.Deadline(); ok {
		if pd, ok := p.Deadline(); !ok || d.Before(pd) {
			return context.WithDeadline(p, d)
		}
	}
	return p, func() {}
}

// release gives back taken members after a failed acquisition, each with
// its hold's context when held has them (a later member's context ends with
// its release), else with ctx; with ctx done, each release goes on in the
// background (see Mutex.Unlock).
//
// bounded (a TryLock) gives the releases rollbackGrace in all: one not
// confirmed by then goes on in the background too, unreported, so that a
// Redis that stops answering does not hold TryLock long past its wait.
func (ml *MultiLock) release(ctx context.Context, taken []Member, held []context.Context, bounded bool) error {
	var bound time.Time
	if bounded {
		bound = time.Now().Add(rollbackGrace)
	}
	var errs []error
	for i := len(taken) - 1; i >= 0; i-- {
		c := ctx
		if held != nil {
			c = held[i]
		}
		cancel := context.CancelFunc(func() {})
		if bounded {
			c, cancel = context.WithDeadline(c, bound)
		}
		err := taken[i].Unlock(c)
		cut := bounded && ctx.Err() == nil && c.Err() == context.DeadlineExceeded
		cancel()
		if err != nil && !(cut && errors.Is(err, context.DeadlineExceeded)) {
			errs = append(errs, fmt.Errorf("%s: %w", taken[i].Name(), err))
		}
	}
	return errors.Join(errs...)
}

// rollbackGrace bounds how long a TryLock that failed waits for the
// releases of the members it took.
const rollbackGrace = 100 * time.Millisecond
