package dlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

var (
	//go:embed scripts/election_announce.lua
	luaAnnounce    string
	scriptAnnounce = newScript(luaAnnounce)
)

var (
	// ErrNoLeader is returned by Election.Leader when the election has no
	// leader.
	ErrNoLeader = errors.New("dlock: the election has no leader")
	// ErrResigned is the cause of a leadership context ended by Resign.
	ErrResigned = errors.New("dlock: leadership resigned")
)

// Election is a handle on a leader election among every process that uses
// the same name (compare etcd's concurrency.Election). It is built on a
// Mutex: the leader is the holder of the election's lock, renewed by the
// watchdog, so exactly one candidate leads at a time while Redis keeps its
// data, and a leader that crashes or is cut off is replaced once its lock's
// TTL (the watchdog timeout) runs out. Resign hands the lock, and so the
// leadership, straight to the first waiting candidate.
//
// Like a Mutex, an Election handle admits one campaigner at a time: a second
// Campaign through the same handle waits until the first one's leadership
// ends. Use one handle per candidate. An Election is safe for concurrent use.
//
// Redis layout: the lock is the Mutex "dlock:election:{name}" (its hash, its
// fencing counter, its queue of waiting candidates); the leader's value is
// the hash's field "leader", "<fencing token> <value>", so it lives and dies
// with the hold. Each new leader is announced on the channel
// "dlock:election-changes:{name}" as "L <token> <value>".
type Election struct {
	c    *Client
	name string
	ks   keys.ElectionSet
	m    *Mutex
	err  error // a bad name, reported by every method

	mu   sync.Mutex
	term *leadership // the current (or last) leadership won through the handle
}

// leadership is one won campaign.
type leadership struct {
	h      *hold
	cancel context.CancelCauseFunc
}

// Election returns a handle on the election name. An invalid name is
// reported by the handle's first method call.
func (c *Client) Election(name string) *Election {
	e := &Election{c: c, name: name}
	if err := keys.Validate(name); err != nil {
		e.err = fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		return e
	}
	e.ks = keys.Election(name)
	e.m = c.Mutex(e.ks.Lock)
	if e.m.nameErr != nil {
		e.err = e.m.nameErr // too long once prefixed
	}
	return e
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

func (e *Election) check(ctx context.Context) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case e.err != nil:
		return e.err
	case e.c.closed.Load():
		return ErrClosed
	}
	return nil
}

// Campaign waits until this caller leads the election, or until ctx is done
// (it then returns ctx's cause), and announces value as the leader's value.
//
// It returns a context for the leadership: it carries ctx's values but not
// its deadline (ctx bounds the campaign only), and it is cancelled when the
// leadership ends: with a cause wrapping ErrLockLost when it is lost (the
// watchdog could not confirm it in time, Redis lost it, Close), no later
// than the election's lock could have expired, and with ErrResigned on
// Resign. Do the leader's work under that context.
func (e *Election) Campaign(ctx context.Context, value string) (context.Context, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if holdFrom(ctx, e.c, e.ks.Lock) != nil {
		return nil, fmt.Errorf("%w: ctx already leads the election %q", ErrInvalidArgument, e.name)
	}
	h, err := e.m.lock(ctx, lockRequest{forever: true, maxHold: -1})
	if err != nil {
		return nil, err
	}
	ok, _, err := roundTrip(e.c, ctx, func(ctx context.Context) (int64, error) {
		return scriptAnnounce.run(ctx, e.c, []any{e.ks.Lock}, h.fieldArg, h.token, value, e.ks.Changes).Int64()
	}, nil)
	if err != nil || ok != 1 {
		_ = e.c.releaseDetached(ctx, h, true)
		if err == nil {
			err = lossError(e.ks.Lock, ErrTakenOver, nil)
		}
		return nil, err
	}
	hctx, _ := h.context(context.WithoutCancel(ctx))
	lctx, cancel := context.WithCancelCause(hctx)
	e.mu.Lock()
	e.term = &leadership{h: h, cancel: cancel}
	e.mu.Unlock()
	h.onEnded(func(err error) {
		if err != nil {
			// Lost: give the lock up (it may still be ours in Redis, but the
			// leader has been told it is not) and free the handle for the
			// next Campaign.
			e.c.detach(func(ctx context.Context) { _ = h.release(ctx, true) })
		}
	})
	return lctx, nil
}

// Resign ends this handle's leadership: the leadership context is cancelled
// with ErrResigned first, then the election's lock is released and handed
// straight to the first waiting candidate, which leads at once. The release
// is sent even when ctx is done (detached, bounded by the cleanup timeout;
// ctx may be the leadership context itself). It returns ErrNotHeld when the
// handle does not lead, and an error wrapping ErrLockLost when the
// leadership had been lost.
func (e *Election) Resign(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if e.err != nil {
		return e.err
	}
	e.mu.Lock()
	t := e.term
	e.term = nil
	e.mu.Unlock()
	if t == nil {
		return ErrNotHeld
	}
	t.cancel(ErrResigned)
	if errors.Is(context.Cause(ctx), ErrResigned) {
		// The leadership context, just ended by this very call.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), e.c.cfg.cleanupTimeout)
		defer cancel()
	}
	return e.c.releaseDetached(ctx, t.h, true)
}

// Leader returns the current leader's value, or ErrNoLeader when nobody
// leads (a new leader counts once it has announced its value, moments
// after its grant). One Redis call; safe for concurrent use.
func (e *Election) Leader(ctx context.Context) (string, error) {
	if err := e.check(ctx); err != nil {
		return "", err
	}
	v, _, err := roundTrip(e.c, ctx, func(ctx context.Context) (string, error) {
		return e.c.rdb.HGet(ctx, e.ks.Lock, keys.LeaderField).Result()
	}, nil)
	if errors.Is(err, redis.Nil) {
		return "", ErrNoLeader
	}
	if err != nil {
		return "", err
	}
	if _, val, ok := keys.ParseLeaderValue(v); ok {
		return val, nil
	}
	return "", fmt.Errorf("dlock: election %q has a malformed leader field %q", e.name, v)
}
