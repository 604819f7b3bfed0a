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

// ContextWithGrant returns a copy of ctx that carries g, for GrantFrom and
// TokenFrom. dlock attaches the grant itself to the context WithLock passes
// to fn; Fallback implementations use this to do the same. Safe for
// concurrent use.
func ContextWithGrant(ctx context.Context, g Grant) context.Context {
	return context.WithValue(ctx, grantKey{}, g)
}

// GrantFrom returns the innermost grant ctx carries, and whether it carries
// one. Safe for concurrent use.
func GrantFrom(ctx context.Context) (Grant, bool) {
	g, ok := ctx.Value(grantKey{}).(Grant)
	return g, ok
}
