package kind

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/wire"
)

var (
	//go:embed latch_set.lua
	luaLatchSet string
	//go:embed latch_down.lua
	luaLatchDown string

	scriptLatchSet  = script(luaLatchSet)
	scriptLatchDown = script(luaLatchDown)
)

// LatchDownsTTL is how long the ids of a latch's count-downs are kept when
// its count has no TTL (a latch Redisson set): far longer than go-redis
// goes on resending a call.
const LatchDownsTTL = 10 * time.Minute

// Latch is a count-down latch (Redisson's RCountDownLatch; see dlock's
// CountDownLatch for the contract). It is not a lease: a count in Redis,
// two scripts, and waiters that listen on the latch's channel through the
// engine's hub and read the count again on every message and re-check.
type Latch struct {
	e    *lease.Engine
	name string
	ks   keys.LatchSet
	err  error // a bad name, reported by every call
}

// Init prepares p for the latch name on e.
func (p *Latch) Init(e *lease.Engine, name string) {
	p.e, p.name = e, name
	if err := keys.Validate(name); err != nil {
		p.err = fmt.Errorf("%w: %w", lease.ErrInvalidArgument, err)
		return
	}
	p.ks = e.Cfg.Space.Latch(name)
	p.ks.Channel = modeChannel(e, p.ks.Channel, p.ks.Count)
}

func (p *Latch) check(ctx context.Context) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", lease.ErrInvalidArgument)
	case p.err != nil:
		return p.err
	case p.e.Closed():
		return lease.ErrClosed
	}
	return nil
}

// TrySetCount sets the count to n, living ttl, when the latch does not
// exist, and reports whether it did. The call carries an id of its own,
// which latch_set.lua keeps in the marker, so that a resend of the call
// (its reply lost) reports true as the call did.
func (p *Latch) TrySetCount(ctx context.Context, n int64, ttl time.Duration) (bool, error) {
	if err := p.check(ctx); err != nil {
		return false, err
	}
	switch {
	case n < 1:
		return false, fmt.Errorf("%w: latch %q: count %d, at least 1 is needed", lease.ErrInvalidArgument, p.name, n)
	case ttl < time.Millisecond:
		return false, fmt.Errorf("%w: latch %q: ttl %v, at least 1ms is needed (a latch never lives forever)", lease.ErrInvalidArgument, p.name, ttl)
	}
	id := strconv.FormatUint(rand.Uint64(), 36)
	set, err := p.run(ctx, scriptLatchSet, []any{p.ks.Count, p.ks.Marker, p.ks.Downs}, n, lease.Ms(ttl), p.ks.Channel, id)
	return set == 1, err
}

// CountDown takes one off the count; at zero the latch is deleted and its
// waiters are told.
func (p *Latch) CountDown(ctx context.Context) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	id := strconv.FormatUint(rand.Uint64(), 36)
	_, err := p.run(ctx, scriptLatchDown, []any{p.ks.Count, p.ks.Downs, p.ks.Marker}, p.ks.Channel, id, lease.Ms(LatchDownsTTL))
	for _, o := range p.e.Cfg.Observers {
		if lo, ok := o.(lease.LatchObserver); ok {
			lo.CountedDown(p.name, err)
		}
	}
	return err
}

// run sends one script call; a call still queued when ctx ends is not sent.
func (p *Latch) run(ctx context.Context, s *wire.Script, keyArgs []any, args ...any) (int64, error) {
	cmd := s.IntCmd(make([]any, 0, 3+len(keyArgs)+len(args)), keyArgs, args...)
	cl := wire.NewCall(cmd, s)
	cl.Droppable = true
	if left, err := p.e.Wire.Do(ctx, cl); left {
		return 0, err
	}
	defer cl.Free()
	return cmd.Result()
}

// Count returns the count, 0 when the latch does not exist.
func (p *Latch) Count(ctx context.Context) (int64, error) {
	if err := p.check(ctx); err != nil {
		return 0, err
	}
	return p.count(ctx)
}

func (p *Latch) count(ctx context.Context) (int64, error) {
	// One Cmd reads GET's reply and the script's alike (Int64 parses the
	// bulk string; a missing latch is redis.Nil).
	args, keyPos, s := []any{"get", p.ks.Count}, int8(1), (*wire.Script)(nil)
	if p.e.Wire.ReadsReplicas() {
		// A replica's lagging copy could say "no latch" (open) for one
		// the primary has just set: the primary answers a script.
		s = PrimaryRead
		args, keyPos = s.Args(nil, []any{p.ks.Count}, "get"), 3
	}
	cmd := redis.NewCmd(context.Background(), args...)
	cmd.SetFirstKeyPos(keyPos)
	cl := wire.NewCall(cmd, s)
	cl.Droppable = true
	if left, err := p.e.Wire.Do(ctx, cl); left {
		return 0, err
	}
	defer cl.Free()
	n, err := cmd.Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// Wait returns nil once the count is zero (the latch absent), ctx's cause
// when ctx ends first, ErrClosed when the engine closes. A message on the
// latch's channel only wakes it: whatever it says, the count in Redis
// decides, read again on every message and every re-check interval.
func (p *Latch) Wait(ctx context.Context) (err error) {
	if err := p.check(ctx); err != nil {
		return err
	}
	if len(p.e.Cfg.Observers) > 0 {
		start := time.Now()
		defer func() {
			for _, o := range p.e.Cfg.Observers {
				if lo, ok := o.(lease.LatchObserver); ok {
					lo.LatchWaited(p.name, time.Since(start), err)
				}
			}
		}()
	}
	return p.wait(ctx)
}

// wait is Wait after its checks.
func (p *Latch) wait(ctx context.Context) error {
	if n, err := p.count(ctx); err != nil || n <= 0 {
		return err
	}
	// Joined before the count is read again: a count-down after that read
	// publishes a message this waiter hears (the hub wakes it when the
	// channel's subscription is confirmed, in case the read came first).
	hub := p.e.Hub()
	w, err := hub.JoinAll(ctx, p.ks.Channel)
	if err != nil {
		return p.e.WrapClosed(err)
	}
	defer hub.Leave(w)
	recheck := time.NewTimer(p.e.Cfg.Recheck)
	defer recheck.Stop()
	for {
		n, err := p.count(ctx)
		if err != nil {
			return err
		}
		// A scout's read tells the other waiters whether to read too
		// (notify's scout.go).
		hub.Tried(w, n <= 0)
		if n <= 0 {
			return nil
		}
		select {
		case <-w.C:
			if w.Take().Closed {
				return lease.ErrClosed
			}
		case <-recheck.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		recheck.Reset(p.e.Cfg.Recheck)
	}
}
