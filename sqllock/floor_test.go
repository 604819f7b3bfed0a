package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
	"github.com/dlock-dev/dlock/sqllock"
)

// A grant a caller made with dlock.ContextWithGrant is no fencing floor:
// only a hold's own grant is. Before, Grant{Token: 2^63-2} in ctx set the
// name's SQL token to MaxInt64, and every later WithLock of the name
// failed ("bigint out of range") for good.
func TestFabricatedGrantIsNoFloor(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		l := b.newLocker(t, b.open(t))
		ctx := ctxT(t, 30*time.Second)
		name := fmt.Sprintf("floor:fake:%s:%d", b.name, time.Now().UnixNano())
		fake := dlock.ContextWithGrant(ctx, dlock.Grant{Name: name, Token: math.MaxInt64 - 1, Backend: dlock.BackendRedis})
		var first uint64
		if err := l.WithLock(fake, name, func(fctx context.Context) error { first = dlock.TokenFrom(fctx); return nil }); err != nil {
			t.Fatal(err)
		}
		if first >= math.MaxInt64/2 {
			t.Fatalf("token %d: the fabricated grant was used as the floor", first)
		}
		var next uint64
		if err := l.WithLock(ctx, name, func(fctx context.Context) error { next = dlock.TokenFrom(fctx); return nil }); err != nil {
			t.Fatalf("an honest WithLock after the fabricated grant: %v", err)
		}
		if next <= first {
			t.Fatalf("tokens %d then %d", first, next)
		}
	})
}

// An explicit floor beyond MaxTokenFloor is refused before any network
// call: it would leave no room for the tokens after it.
func TestTokenFloorBounded(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		l := b.newLocker(t, b.open(t))
		ctx := ctxT(t, 10*time.Second)
		_, err := l.Acquire(ctx, "floor:bounded", dlock.FallbackRequest{}, sqllock.MaxTokenFloor+1)
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Fatalf("Acquire above MaxTokenFloor = %v, want ErrInvalidArgument", err)
		}
		err = l.WithLock(ctx, "floor:bounded", func(context.Context) error { return nil }, dlock.TokenFloor(math.MaxInt64-1))
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Fatalf("WithLock with TokenFloor(MaxInt64-1) = %v, want ErrInvalidArgument", err)
		}
	})
}

// A real Redis hold's grant in ctx is the floor of WithLock: its token is
// trusted, since Redis issued it.
func TestHeldGrantIsTheFloor(t *testing.T) {
	r := testenv.StartRedis(t)
	each(t, func(t *testing.T, b backend) {
		l := b.newLocker(t, b.open(t))
		c := tiered(t, r.Addr(), l, nil)
		ctx := ctxT(t, 30*time.Second)
		name := fmt.Sprintf("floor:held:%s:%d", b.name, time.Now().UnixNano())
		// The Redis counter ran far ahead of the database's clock.
		ahead := uint64(b.now(t, b.open(t))) + 1e12
		if err := redisFor(t, r.Addr()).Set(ctx, "dlock:fence:{"+name+"}", ahead, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		err := c.WithLock(ctx, name, func(rctx context.Context) error {
			if tok := dlock.TokenFrom(rctx); tok != ahead+1 {
				t.Fatalf("Redis token %d, want %d", tok, ahead+1)
			}
			return l.WithLock(rctx, name, func(fctx context.Context) error {
				if tok := dlock.TokenFrom(fctx); tok <= ahead+1 {
					t.Errorf("SQL token %d is not above the Redis hold's %d", tok, ahead+1)
				}
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
