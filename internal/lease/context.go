package lease

import (
	"context"
	"errors"
)

// holdsKey is the context key under which a Client's holds travel: one
// key per Client, whose value lists the holds of every name the context
// carries, innermost first. (A struct holding one pointer is boxed without
// allocating, so a lookup costs nothing.)
type holdsKey struct{ e *Engine }

// ctxHolds is one hold a context carries, and the ones it was taken under.
type ctxHolds struct {
	h    *Lease
	prev *ctxHolds
}

// From returns the innermost lease of name by e that ctx carries, or nil.
func From(ctx context.Context, e *Engine, name string) *Lease {
	for n, _ := ctx.Value(holdsKey{e}).(*ctxHolds); n != nil; n = n.prev {
		if n.h.name == name {
			return n.h
		}
	}
	return nil
}

// Context returns a context that carries the lease (for re-entry, Unlock,
// GrantFrom and TokenFrom) and is cancelled when the lease ends or parent
// is done; the cause is the lease's loss, or a release error. Its cancel
// also frees what it set up on the lease.
func (h *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	h.mu.Lock()
	h.contexts++
	h.mu.Unlock()
	prev, _ := parent.Value(holdsKey{h.e}).(*ctxHolds)
	ctx = context.WithValue(ctx, holdsKey{h.e}, &ctxHolds{h: h, prev: prev})
	ctx = ContextWithHeldGrant(ctx, h.Grant())
	forget := h.onEnded(func(err error) {
		if err == nil {
			err = ErrReleased
		}
		cancel(err)
	})
	return ctx, func() {
		cancel(context.Canceled)
		forget()
	}
}

// ContextBeside is Context for a lease taken under the write lease it
// stands beside (a downgrade: h.Outer() is not nil) with ctx, which carries
// that write lease. The context carries ctx's values and deadline, as
// Context's does, and ends when h ends or ctx is done, except when ctx is
// done because the write lease ended: h outlives it. What it sets up is
// freed when h ends. For a lease taken under none it is Context(ctx).
func (h *Lease) ContextBeside(ctx context.Context) (context.Context, context.CancelFunc) {
	out := h.outer
	if out == nil {
		return h.Context(ctx)
	}
	parent := context.WithoutCancel(ctx)
	stopDeadline := context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		parent, stopDeadline = context.WithDeadline(parent, d)
	}
	parent, cancelParent := context.WithCancelCause(parent)
	stop := context.AfterFunc(ctx, func() {
		if ctx.Err() == context.DeadlineExceeded {
			return // parent's own deadline, the same, ends it
		}
		if cause := context.Cause(ctx); !out.endedWith(cause) {
			cancelParent(cause)
		}
	})
	hctx, cancel := h.Context(parent)
	// After Context's own callback, which gives hctx h's cause.
	release := func() {
		stop()
		stopDeadline()
		cancelParent(context.Canceled)
	}
	forget := h.onEnded(func(error) { release() })
	return hctx, func() {
		cancel()
		forget()
		release()
	}
}

// endedWith reports whether h has ended and cause is what its contexts
// were cancelled with (Context): its loss, or ErrReleased.
func (h *Lease) endedWith(cause error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.ended:
		return false
	case h.err != nil:
		return cause == h.err
	}
	return cause == ErrReleased
}

// AsCaller returns ctx standing, where a hold is named by the context its
// lock call was given (Handle.Current), for the caller whose lock calls
// were given caller: a release bounded by a deadline of its own (a
// SyncLocker's Unlock, which has no context) still names the holds taken
// with caller.
func AsCaller(ctx, caller context.Context) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

type callerKey struct{}

// callerOf is the context ctx stands for (AsCaller), or ctx itself.
func callerOf(ctx context.Context) context.Context {
	if c, ok := ctx.Value(callerKey{}).(context.Context); ok {
		return c
	}
	return ctx
}

// doneError is the error of a call that returned because its context was
// done with a cause of its own (WithCancelCause, a hold's loss or release):
// errors.Is matches both the context's error and the cause.
type doneError struct{ err, cause error }

func (e *doneError) Error() string   { return e.cause.Error() }
func (e *doneError) Unwrap() []error { return []error{e.err, e.cause} }

// CtxErr is the error of a call that returns because ctx is done:
// errors.Is(err, context.Canceled) (or DeadlineExceeded) holds, and so does
// errors.Is(err, cause) for ctx's cause. nil while ctx is live.
func CtxErr(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, err) {
		return &doneError{err: err, cause: cause}
	}
	return err
}

// doneErr turns err into CtxErr(ctx) when it is ctx's cause: what a call
// below (the gate, the wire) answered for ctx being done.
func doneErr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if err == context.Cause(ctx) || err == ctx.Err() {
		return CtxErr(ctx)
	}
	return err
}

// Grant describes the lease for GrantFrom and TokenFrom.
func (h *Lease) Grant() Grant { return Grant{Name: h.name, Token: h.token, Backend: BackendRedis} }

// Outer returns the lease h was taken under (a downgrading writer's), or
// nil.
func (h *Lease) Outer() *Lease { return h.outer }

// Parent returns the context the lease was asked for with.
func (h *Lease) Parent() context.Context { return h.parent }
