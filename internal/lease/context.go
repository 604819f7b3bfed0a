package lease

import "context"

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
	prev, _ := parent.Value(holdsKey{h.e}).(*ctxHolds)
	ctx = context.WithValue(ctx, holdsKey{h.e}, &ctxHolds{h: h, prev: prev})
	ctx = ContextWithHeldGrant(ctx, Grant{Name: h.name, Token: h.token, Backend: BackendRedis})
	h.OnEnded(func(err error) {
		if err == nil {
			err = errReleased
		}
		cancel(err)
	})
	return ctx, func() { cancel(context.Canceled) }
}

// Outer returns the lease h was taken under (a downgrading writer's), or
// nil.
func (h *Lease) Outer() *Lease { return h.outer }

// Parent returns the context the lease was asked for with.
func (h *Lease) Parent() context.Context { return h.parent }
