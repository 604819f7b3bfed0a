package dlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/kind"
)

// CountDownLatch is a handle on a count-down latch shared by every process
// that uses the same name (Redisson's RCountDownLatch): TrySetCount arms it
// with a count, each CountDown takes one off, and once the count reaches
// zero the latch is deleted and every Wait, in every process, returns. Wait
// is woken by an event (pub/sub) and re-reads the count every re-check
// interval as well; a message only wakes it, since anyone may publish: the
// count in Redis decides. Every call honours its ctx: when ctx ends first,
// a TrySetCount or CountDown already sent may still take effect. A
// CountDownLatch is safe for concurrent use.
//
// Redis layout (Redisson's, so Java services can share a latch): the count
// is a string named by the latch name itself, with the TTL TrySetCount gave
// it; "redisson_countdownlatch__channel__{name}" carries "1" when a count is
// set and "0" when it reaches zero. dlock adds dlock:latch-downs:{name}, a
// set of the ids of the count-downs made, living as long as the count, so
// that a count-down go-redis resends counts once (it also keeps, once the
// count reached zero, the marker's value, so that a resent TrySetCount does
// not arm the opened latch again), and dlock:latch:{name},
// a marker set with the count and deleted with it, by which Client.Locks
// finds the latch (a latch Redisson armed has none and is not listed); it
// holds the id of the TrySetCount call that set the count, so that the
// call, resent, still reports true. A latch and a lock must not share a
// name.
type CountDownLatch struct{ p kind.Latch }

// CountDownLatch returns a new handle on the latch name (not a lookup: the
// latch's state is all in Redis, so any handle of the name will do). A bad
// name is reported (ErrInvalidArgument) by every method. Safe for
// concurrent use.
func (c *Client) CountDownLatch(name string) *CountDownLatch {
	l := &CountDownLatch{}
	l.p.Init(c.e, name)
	return l
}

// TrySetCount sets the count to n when the latch does not exist (true);
// otherwise it changes nothing (false). A call resent because its reply was
// lost still reports true, and does not arm again a latch its count was
// counted down to zero since. The latch lives at most ttl. n < 1
// or ttl <= 0 gives ErrInvalidArgument, with no network call.
func (l *CountDownLatch) TrySetCount(ctx context.Context, n int64, ttl time.Duration) (bool, error) {
	return l.p.TrySetCount(ctx, n, ttl)
}

// CountDown takes one off the count; at zero the latch is deleted and its
// waiters are woken. On an absent latch it does nothing.
func (l *CountDownLatch) CountDown(ctx context.Context) error { return l.p.CountDown(ctx) }

// Count returns the count: 0 for an absent latch.
func (l *CountDownLatch) Count(ctx context.Context) (int64, error) { return l.p.Count(ctx) }

// Wait waits until the count is zero: at once for an absent latch. It
// returns nil, ctx's cause when ctx ends first (whatever Redis does),
// ErrClosed, or the error of a read of the count.
func (l *CountDownLatch) Wait(ctx context.Context) error { return l.p.Wait(ctx) }
