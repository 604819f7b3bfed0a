package lease

import "context"

// Backend names the tier that granted a hold: BackendRedis, or a Fallback's
// Backend ("mysql", "postgres").
const BackendRedis = "redis"

// Grant describes the hold a context carries: the context WithLock passes to
// its fn, or one made by ContextWithGrant. A Grant is a value; safe to copy
// and share.
type Grant struct {
	Name    string // the lock name
	Token   uint64 // the hold's fencing token
	Backend string // which tier granted it: BackendRedis, "mysql", "postgres"
}

type grantKey struct{}

// grantValue is what a context carries under grantKey: the grant, and
// whether dlock attached it for a hold it made (HeldGrantFrom).
type grantValue struct {
	g    Grant
	held bool
}

// ContextWithGrant returns a copy of ctx that carries g, for GrantFrom and
// TokenFrom. dlock attaches the grant itself to the context WithLock passes
// to fn; Fallback implementations use this to do the same. Safe for
// concurrent use.
func ContextWithGrant(ctx context.Context, g Grant) context.Context {
	return context.WithValue(ctx, grantKey{}, grantValue{g: g})
}

// ContextWithHeldGrant is ContextWithGrant for a grant of a hold dlock
// made, which HeldGrantFrom returns too. Only dlock's own code calls it.
func ContextWithHeldGrant(ctx context.Context, g Grant) context.Context {
	return context.WithValue(ctx, grantKey{}, grantValue{g: g, held: true})
}

// GrantFrom returns the innermost grant ctx carries, and whether it carries
// one. Safe for concurrent use.
func GrantFrom(ctx context.Context) (Grant, bool) {
	v, ok := ctx.Value(grantKey{}).(grantValue)
	return v.g, ok
}

// HeldGrantFrom returns the innermost grant ctx carries when dlock attached
// it for a hold it made (ContextWithHeldGrant), and false when ctx carries
// none or the innermost came from ContextWithGrant: anyone can make one of
// those with any token, so it must not serve as a fencing floor. Safe for
// concurrent use.
func HeldGrantFrom(ctx context.Context) (Grant, bool) {
	v, ok := ctx.Value(grantKey{}).(grantValue)
	return v.g, ok && v.held
}
