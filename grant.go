package dlock

import (
	"context"

	"github.com/dlock-dev/dlock/internal/lease"
)

// BackendRedis, "redis", names the Redis tier in a Grant's Backend; a
// Fallback names its own ("mysql", "postgres").
const BackendRedis = lease.BackendRedis

// Grant describes the hold a context carries: the context WithLock passes to
// its fn, or one made by ContextWithGrant. A Grant is a value; safe to copy
// and share.
type Grant struct {
	// Name is the lock's name.
	Name string
	// Token is the hold's fencing token.
	Token uint64
	// Backend is the tier that granted the hold: BackendRedis, or a
	// Fallback's Backend ("mysql", "postgres").
	Backend string
}

// ContextWithGrant returns a copy of ctx that carries g, for GrantFrom and
// TokenFrom. dlock attaches the grant itself to the context WithLock passes
// to fn; Fallback implementations use this to do the same. Safe for
// concurrent use.
func ContextWithGrant(ctx context.Context, g Grant) context.Context {
	return lease.ContextWithGrant(ctx, lease.Grant(g))
}

// GrantFrom returns the innermost grant ctx carries, and whether it carries
// one. Safe for concurrent use.
func GrantFrom(ctx context.Context) (Grant, bool) {
	g, ok := lease.GrantFrom(ctx)
	return Grant(g), ok
}

// HeldGrantFrom returns the innermost grant ctx carries if dlock attached it
// for a hold a Client made (a lock's context, WithLock's fn context), and
// false when ctx carries none or its innermost grant came from
// ContextWithGrant, which anyone can call with any token. Use it where a
// grant's token is trusted, as a fencing floor for another tier
// (sqllock's WithLock does). Safe for concurrent use.
func HeldGrantFrom(ctx context.Context) (Grant, bool) {
	g, ok := lease.HeldGrantFrom(ctx)
	return Grant(g), ok
}

// TokenFrom returns the fencing token of the innermost grant ctx carries, or
// 0 when it carries none. Pass it to the resource the lock protects and have
// the resource reject a write whose token is lower than one it has seen.
// Safe for concurrent use.
func TokenFrom(ctx context.Context) uint64 {
	g, _ := lease.GrantFrom(ctx)
	return g.Token
}
