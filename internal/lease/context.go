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
// is done; the cause is the lease's loss, or a release error.
func (h *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	h.mu.Lock()
	h.contexts++
	h.mu.Unlock()
	prev, _ := parent.Value(holdsKey{h.e}).(*ctxHolds)
	ctx = context.WithValue(ctx, holdsKey{h.e}, &ctxHolds{h: h, prev: prev})
	ctx = ContextWithHeldGrant(ctx, h.Grant())
	h.OnEnded(func(err error) {
		if err == nil {
			err = ErrReleased
		}
		cancel(err)
	})
	return ctx, func() { cancel(context.Canceled) }
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
