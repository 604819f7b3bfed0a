package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

const (
	rueidislockValidity = 5 * time.Second
	// rueidislockRewait bounds one WithContext wait; see Acquire. It equals
	// the ExtendInterval (validity/2), the interval at which rueidislock
	// itself re-polls when client-side caching is disabled.
	rueidislockRewait = rueidislockValidity / 2
)

// rueidislockRewaits counts waits that hit rueidislockRewait (reported per
// run as adapter re-waits).
var rueidislockRewaits atomic.Int64

type rueidislockLib struct{}

func init() { register(rueidislockLib{}) }

func (rueidislockLib) Name() string   { return "rueidislock" }
func (rueidislockLib) Module() string { return "github.com/redis/rueidis" }
func (rueidislockLib) Settings() string {
	return fmt.Sprintf("KeyMajority 1 (one Redis), KeyValidity %v (ExtendInterval default = validity/2), NoLoopTracking true (server >= 7.0.5), client-side caching on (waiters are woken by invalidations), TryNextAfter default 20ms; the adapter re-calls WithContext when one wait exceeds %v, to bound a lost wake-up in v1.0.79 (see README)", rueidislockValidity, rueidislockRewait)
}

// Rewaits implements rewaitCounter.
func (rueidislockLib) Rewaits() int64 { return rueidislockRewaits.Load() }

func (rueidislockLib) NewClient(addr string) (Client, error) {
	return newRueidislockClient(addr, rueidislockValidity)
}

// NewRenewingClient implements renewingLib: KeyValidity ttl; rueidislock
// extends each held key on its own every ExtendInterval (default ttl/2).
func (rueidislockLib) NewRenewingClient(addr string, ttl time.Duration) (Client, time.Duration, error) {
	c, err := newRueidislockClient(addr, ttl)
	return c, ttl / 2, err
}

func newRueidislockClient(addr string, validity time.Duration) (Client, error) {
	lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		KeyValidity:    validity,
		NoLoopTracking: true,
	})
	if err != nil {
		return nil, err
	}
	return &rueidislockClient{lk: lk, rewait: rueidislockRewait}, nil
}

type rueidislockClient struct {
	lk     rueidislock.Locker
	rewait time.Duration
}

// Acquire waits with WithContext, but never longer than c.rewait in one
// call. rueidislock v1.0.79 can lose a waiter's wake-up for good: in
// locker.try, the goroutine started for a failed attempt (monitoring) reads
// the failures counter before try increments it, takes the "released"
// branch, and decrements/deletes the waiter's gate, so later invalidations
// find no gate and WithContext sleeps until its context ends. Observed in
// about one run in ten of W=10 x K=10 here (more under -race). Re-calling
// WithContext after c.rewait bounds such a stall the way rueidislock bounds
// waits when client-side caching is disabled.
func (c *rueidislockClient) Acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	for {
		sub, cancelSub := context.WithCancel(ctx)
		timer := time.AfterFunc(c.rewait, cancelSub)
		// The returned lock context (derived from sub) is canceled if the
		// lock is lost; the bench's critical section is a fixed sleep, so it
		// is not watched.
		_, unlock, err := c.lk.WithContext(sub, key)
		stopped := timer.Stop()
		if err == nil {
			if stopped {
				// unlock deletes the key (compare-and-delete script) and waits for it.
				return func(context.Context) error { unlock(); cancelSub(); return nil }, nil
			}
			// The bound fired as the lock was granted: the lock context is
			// canceled, so this grant is void. Release it and wait again.
			unlock()
		}
		cancelSub()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil && stopped {
			return nil, err
		}
		rueidislockRewaits.Add(1)
	}
}

func (c *rueidislockClient) Close() error { c.lk.Close(); return nil }

// Ping implements Pinger, through the client the locks use.
func (c *rueidislockClient) Ping(ctx context.Context) error {
	return c.lk.Client().Do(ctx, c.lk.Client().B().Ping().Build()).Error()
}
