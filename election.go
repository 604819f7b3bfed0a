package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/wire"
)

var (
	// ErrNoLeader is returned by Election.Leader when there is no leader.
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
	p    kind.Election
	err  error // a bad name, reported by every method

	mu   sync.Mutex
	term *leadership // the current (or last) leadership won through the handle
}

// errEmptyValue refuses "" as a leader's value: Observe's "no leader".
var errEmptyValue = fmt.Errorf("%w: empty leader value (Observe's \"no leader\")", ErrInvalidArgument)

// leadership is one won campaign.
type leadership struct {
	h      *lease.Lease
	cancel context.CancelCauseFunc
	e      *Election // the handle that won it
}

// termKey is the key of a leadership context's term: Resign finds the term
// from the context through any handle of the election, as Proclaim does.
type termKey struct {
	c    *Client
	name string
}

// Election returns a new handle on the election name: unlike Client.Mutex,
// it is not a lookup, and each call returns a new handle. That matters for
// Resign and Proclaim: without a leadership context they act on the term
// won through the very handle they are called on; with the leadership
// context Campaign returned, they act on that term through any handle of
// the name on the same Client. Two Election handles of one name on one
// Client share the election's lock handle, so their Campaigns wait for each
// other in the process. (Client.Semaphore, Client.CountDownLatch and
// Client.MultiLock return new handles too, which makes no difference there:
// a Semaphore's holds are its Permits, a latch has no holder, and a
// MultiLock's members are looked up.) An invalid name is reported by the
// handle's first method call. Safe for concurrent use.
func (c *Client) Election(name string) *Election {
	e := &Election{c: c, name: name}
	if err := keys.Validate(name); err != nil {
		e.err = fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		return e
	}
	e.ks = c.cfg.Space.Election(name)
	e.m = c.Mutex(keys.Companion(keys.ElectionPrefix, name)) // the Space prefixes its key
	if e.err = e.m.hd.NameErr(); e.err == nil {              // too long once prefixed?
		e.p.Init(c.e, name, e.ks, &e.m.p)
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
	case e.c.e.Closed():
		return ErrClosed
	}
	return nil
}

// Campaign waits until this caller leads the election, or until ctx is done
// (it then returns ctx's cause), and announces value as the leader's value.
// value must not be empty (ErrInvalidArgument): Observe delivers "" for an
// election without a leader.
//
// It returns a context for the leadership: it carries ctx's values but not
// its deadline (ctx bounds the campaign only), and it is cancelled when the
// leadership ends: with a cause wrapping ErrLockLost when it is lost (the
// watchdog could not confirm it in time, Redis lost it, Close), before the
// election's lock's TTL runs out after its last confirmed renewal, and so
// before another candidate can take over; and with ErrResigned on Resign.
// Do the leader's work under that context.
func (e *Election) Campaign(ctx context.Context, value string) (context.Context, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if value == "" {
		return nil, errEmptyValue
	}
	if lease.From(ctx, e.c.e, e.m.Name()) != nil {
		return nil, fmt.Errorf("%w: ctx already leads the election %q", ErrInvalidArgument, e.name)
	}
	h, err := e.m.hd.Acquire(ctx, lease.Request{Forever: true, MaxHold: -1})
	if err != nil {
		return nil, err
	}
	ok, err := e.p.Announce(ctx, h, value)
	if err != nil || !ok {
		_ = h.Release(ctx, true)
		if err == nil {
			err = &LossError{Name: e.m.Name(), Reason: ErrTakenOver}
		}
		return nil, err
	}
	hctx, _ := h.Context(context.WithoutCancel(ctx))
	lctx, cancel := context.WithCancelCause(hctx)
	t := &leadership{h: h, cancel: cancel, e: e}
	lctx = context.WithValue(lctx, termKey{e.c, e.name}, t)
	e.mu.Lock()
	e.term = t
	e.mu.Unlock()
	h.OnEnded(func(err error) {
		if err != nil {
			// Lost: give the lock up (it may still be ours in Redis, but the leader has
			// been told it is not) and free the handle for the next Campaign.
			e.c.e.Detach(func(ctx context.Context) { _ = h.Release(ctx, true) })
		}
	})
	return lctx, nil
}

// Resign ends a leadership: the one ctx leads (a leadership context of this
// election from Campaign on any handle of the Client, or one derived from
// it), else this handle's. The leadership context is cancelled
// with ErrResigned first, then the election's lock is released and handed
// straight to the first waiting candidate, which leads at once. The release
// is sent even when ctx is done (detached, bounded by the cleanup timeout;
// ctx may be the leadership context itself). It returns ErrNotHeld when the
// handle does not lead, and an error wrapping ErrLockLost when the
// leadership had been lost. With a leadership context (Campaign's, or one
// derived from it) it ends that term only: once that term has ended, it
// reports so and leaves alone a term the handle won since, which is
// another caller's to end.
func (e *Election) Resign(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if e.err != nil {
		return e.err
	}
	// The term to end: the one ctx leads, won through any handle, or
	// without a leadership context this handle's.
	owner := e
	if own := lease.From(ctx, e.c.e, e.m.Name()); own != nil {
		lt, _ := ctx.Value(termKey{e.c, e.name}).(*leadership)
		if lt == nil || lt.h != own {
			return ErrNotHeld // not a context Campaign made
		}
		owner = lt.e
		owner.mu.Lock()
		if owner.term != lt {
			// A term that has ended: the handle's current term, if any,
			// is another caller's to end.
			owner.mu.Unlock()
			if err := own.Err(); err != nil {
				return err
			}
			return ErrNotHeld
		}
	} else {
		owner.mu.Lock()
	}
	t := owner.term
	owner.term = nil
	owner.mu.Unlock()
	if t == nil {
		return ErrNotHeld
	}
	t.cancel(ErrResigned)
	if errors.Is(context.Cause(ctx), ErrResigned) {
		// The leadership context, just ended by this very call.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), e.c.cfg.CleanupTimeout)
		defer cancel()
	}
	return t.h.Release(ctx, true)
}

// Proclaim changes the leader's value without a new election (etcd's
// Proclaim): ctx is the leadership context Campaign returned (or one
// derived from it); without one, the handle's current leadership is used.
// Leader and Observe see the new value. It returns an error, never nil,
// once the leadership has ended: ErrNotHeld, or an error wrapping
// ErrLockLost. An empty value is refused, as by Campaign. Safe for
// concurrent use.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	if value == "" {
		return errEmptyValue
	}
	h := lease.From(ctx, e.c.e, e.m.Name())
	if h == nil {
		e.mu.Lock()
		if e.term != nil {
			h = e.term.h
		}
		e.mu.Unlock()
	}
	if h == nil {
		return ErrNotHeld
	}
	if err := h.Err(); err != nil {
		return err
	}
	ok, err := e.p.Announce(ctx, h, value)
	switch {
	case err != nil:
		return err
	case !ok:
		return &LossError{Name: e.m.Name(), Reason: ErrTakenOver}
	}
	return nil
}

// Leader returns the current leader's value, or ErrNoLeader when nobody
// leads (a new leader counts once it has announced its value, moments
// after its grant). One Redis call; safe for concurrent use.
func (e *Election) Leader(ctx context.Context) (string, error) {
	if err := e.check(ctx); err != nil {
		return "", err
	}
	v, _, err := wire.Go(e.c.e.Wire, ctx, func(ctx context.Context) (string, error) {
		return e.c.e.Redis().HGet(ctx, e.ks.Lock, keys.LeaderField).Result()
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

// Observe returns a channel that receives the election's leader: its value
// when Observe starts (if there is a leader), then the value of every new
// leader as it takes office, and "" when the election is left without a
// leader by a release with no candidate waiting (Resign, Close). A leader
// that vanishes without a release (a crash) shows as the next leader's
// value, when one is elected.
//
// It is event-driven: Observe holds a pub/sub connection of its own,
// subscribed to the election's changes channel and its lock's release
// channel, and reads the leader from Redis when an announcement, a release
// or a reconnection says it may have changed; while nothing changes it sends
// no command. Where pub/sub is refused (an ACL without channels), it reads
// the leader every few seconds instead. What it delivers is what Redis holds, never what a message
// says: a forged announcement costs one read and shows nothing. Values are
// delivered in the order of the leaders' terms (fencing tokens), never
// twice. The channel is closed when ctx is done or the Client is closed (at
// once for bad input or a closed Client). Receive from it promptly: a value
// waits for the receiver. Safe for concurrent use.
func (e *Election) Observe(ctx context.Context) <-chan string {
	if e.check(ctx) != nil {
		out := make(chan string)
		close(out)
		return out
	}
	return e.p.Observe(ctx)
}
