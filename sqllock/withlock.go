package sqllock

import (
	"context"
	"fmt"

	"github.com/dlock-dev/dlock"
)

// heldKey is the context key under which WithLock records its holds, for
// reentry.
type heldKey struct{}

// heldLink is one hold recorded in a context; parent is the enclosing one.
type heldLink struct {
	l      *Locker
	h      *Hold
	parent *heldLink
}

// heldIn returns the hold of name by l that ctx descends from, or nil.
func (l *Locker) heldIn(ctx context.Context, name string) *Hold {
	link, _ := ctx.Value(heldKey{}).(*heldLink)
	for ; link != nil; link = link.parent {
		if link.l == l && link.h.name == name {
			return link.h
		}
	}
	return nil
}

// WithLock runs fn while holding the lock name, like dlock.Client.WithLock:
// it reads opts with dlock.RequestFor (wait, default
// dlock.DefaultWaitTime; lease; kind: dlock.Read is shared on PostgreSQL and
// exclusive on MySQL, the others exclusive), takes the lock with Acquire,
// and runs fn with a context that carries the grant (dlock.GrantFrom,
// dlock.TokenFrom: name, fencing token, Backend) and is cancelled, with a
// cause wrapping dlock.ErrLockLost, as soon as the hold is lost (session
// killed, connection dead, lease over, Close).
//
// The lock is always released when fn returns or panics (or, when calls
// re-entered it, when the last of them returns; see Reentry), even if ctx
// is cancelled by then (the release uses a context detached from ctx,
// bounded by OpTimeout). WithLock returns fn's error untouched; when fn
// returned nil, the release's error (wrapping dlock.ErrLockLost if the hold
// was lost meanwhile; a call that leaves others inside returns the loss, or
// nil). When the lock was not taken it returns Acquire's error: an
// error wrapping dlock.ErrWaitTimeout when the wait ran out, ctx's error
// when ctx ended first (promptly, whatever the database does),
// ErrTooManySessions, dlock.ErrInvalidArgument (also for a nil fn) or
// dlock.ErrClosed before any network call; fn has not run then.
//
// Reentry: a call whose ctx descends from fn's context of a hold of the
// same name by the same Locker runs fn at once within that hold (a read
// hold refuses a nested exclusive call with dlock.ErrUpgrade; a hold that
// was released, its context having outlived its WithLock and every call
// nested in it, gives dlock.ErrNotHeld, and a lost one its loss). Another
// Locker, or a context that does not descend from the hold, waits like any
// other caller. Re-entries count, as in the Redis tier: the hold lasts
// until the last call inside it returns. A nested call still running when
// its outer WithLock returns (on a goroutine fn started) keeps the lock
// held, and its session pinned, until it returns itself; the outer call
// returns at once without releasing, and the nested call's context, which
// descends from the outer fn's, is cancelled then (context.Canceled): it
// should wind up, but nobody else gets the lock before it has.
//
// Tier order: the new token is greater than the options' dlock.TokenFloor
// (at most MaxTokenFloor) and, when ctx carries a dlock.Grant of the same
// name that a dlock hold attached (dlock.HeldGrantFrom: a Redis hold it is
// taken under, say), than that grant's token. A grant made with
// dlock.ContextWithGrant is no floor: its token is whatever its maker
// wrote. A dlock.Client built WithFallback passes both.
//
// Safe for concurrent use.
func (l *Locker) WithLock(ctx context.Context, name string, fn func(context.Context) error, opts ...dlock.LockOption) error {
	req, err := dlock.RequestFor(name, opts...)
	if err != nil {
		return err
	}
	return l.Run(ctx, req, fn)
}

// Run is WithLock with the request made already: it implements
// dlock.Fallback, whose Client passes the request its own WithLock made.
// Safe for concurrent use.
func (l *Locker) Run(ctx context.Context, set dlock.FallbackRequest, fn func(context.Context) error) (err error) {
	name := set.Name
	if fn == nil {
		return fmt.Errorf("%w: nil function", dlock.ErrInvalidArgument)
	}
	if _, err := l.validate(name, set, 0); err != nil {
		return err
	}
	if outer := l.heldIn(ctx, name); outer != nil {
		if outer.kind == dlock.KindRead && set.Kind != dlock.KindRead {
			return fmt.Errorf("%w: %q is held for reading by this call chain", dlock.ErrUpgrade, name)
		}
		if l.isClosed() {
			return fmt.Errorf("sqllock: %q: %w", name, dlock.ErrClosed)
		}
		if lost := outer.Err(); lost != nil {
			return lost
		}
		if !outer.enter() {
			if lost := outer.Err(); lost != nil {
				return lost // lost since the check above
			}
			// A context that outlived its WithLock (and every call
			// nested in it): its hold was released, and another session
			// may hold the lock now.
			return fmt.Errorf("sqllock: %q: %w: the context's hold has been released", name, dlock.ErrNotHeld)
		}
		defer l.leave(ctx, outer, &err)
		return fn(ctx)
	}
	floor := set.TokenFloor // dlock.TokenFloor: the Redis tier's last token
	// Only a hold's own grant (dlock.HeldGrantFrom) is a floor: one made
	// with dlock.ContextWithGrant may carry any token, and a floor near
	// MaxInt64 would leave the name no token to grant ever again.
	if g, ok := dlock.HeldGrantFrom(ctx); ok && g.Name == name {
		floor = max(floor, g.Token)
	}
	h, err := l.Acquire(ctx, name, set, floor)
	if err != nil {
		return err
	}
	parent, _ := ctx.Value(heldKey{}).(*heldLink)
	fctx := context.WithValue(dlock.ContextWithGrant(ctx, h.Grant()), heldKey{}, &heldLink{l: l, h: h, parent: parent})
	fctx, cancel := context.WithCancelCause(fctx)
	defer cancel(nil)
	h.onHoldEnd(func(cause error) {
		if cause != nil {
			cancel(cause)
		}
	})
	h.calls = 1 // before fn, the only way to re-enter, has fctx
	// Deferred, so that a panic in fn does not leave the session pinned.
	defer l.leave(ctx, h, &err)
	return fn(fctx)
}

// leave counts a WithLock call out of h. The last call out releases it,
// whatever ctx says (detached, bounded by OpTimeout), and *err, when nil,
// becomes the release's error. A call that leaves others inside (a nested
// call still running on a goroutine fn started) leaves the lock held for
// them, as a Redis hold's count does; *err, when nil, becomes the hold's
// loss if it was lost.
func (l *Locker) leave(ctx context.Context, h *Hold, err *error) {
	if !h.leave() {
		if *err == nil {
			*err = h.Err()
		}
		return
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.opTimeout)
	defer rcancel()
	if rerr := h.Release(rctx); *err == nil {
		*err = rerr
	}
}
