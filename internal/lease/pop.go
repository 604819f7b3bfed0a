package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/notify"
)

// A waiter of a Popper's lock may take its hand-off without a claim round
// trip: its queue entry carries a mark (keys.PopEntry), the release that
// hands it the lock puts "<token> <claim ms>" in the waiter's box
// (keys.GrantBox), and the waiter keeps a blocking pop (BLPOP) on the box in
// flight while it waits, on a pool connection. The pop's reply comes from
// Redis on the waiter's own connection, from a key that only a client that
// may write the lock's keys can write: it is the grant, as the claim's reply
// would be. A client that may only PUBLISH, or only read, still cannot
// grant anything.
//
// The hand-off gives the lock the claim window as its TTL, counted by Redis
// from the release. The waiter counts it from the last moment it knew the
// box was empty (since): the send time of the attempt that first queued it
// (no hand-off can name an entry that is not queued yet), then of each pop
// that came back empty. Pops time out every popWait, so since is never much
// older than that; the lease is then renewed to its full TTL at half the
// claim window, unless it was released first (a short hold costs no
// renewal). A waiter that gives up leaves the queue as any waiter does (its
// Undo passes on a hand-off that reached it); an item it did not pop expires
// with the claim window, and a Mutex's ForceUnlock deletes it.

const (
	// popWait is one pop's timeout. go-redis sends BLPOP's in whole
	// seconds, and gives the read that long plus its margin.
	popWait = time.Second
	// PopSlots bounds the pops a Client keeps in flight, each on a pool
	// connection of the go-redis client it was given; waiters beyond it
	// are woken by messages. It is lower when that pool is small
	// (popSlots).
	PopSlots = 8
)

// popSlots is how many pops may hold connections of rdb's pool at once: a
// quarter of the pool (of each node's, for a Cluster) and at most PopSlots,
// so that waiting never takes the pool from the application that shares it.
// 0 (a pool of fewer than 4) turns popping off.
func popSlots(rdb redis.UniversalClient) int {
	size := 0
	switch c := rdb.(type) {
	case *redis.Client:
		size = c.Options().PoolSize
	case *redis.ClusterClient:
		size = c.Options().PoolSize
	case *redis.Ring:
		size = c.Options().PoolSize
	}
	return min(PopSlots, size/4)
}

// Popper is a Protocol whose waiters may pop their hand-off.
type Popper interface {
	// PopEntry returns the marked queue entry of l's waiter for ticket and
	// ttl, and its box.
	PopEntry(ticket uint64, ttl time.Duration, l *Lease) (entry, box string)
	// Fenced reports whether the kind's grants carry a fencing token (at
	// least 1). One that does not (a semaphore's permits) hands over 0,
	// and a grant naming any other token is malformed.
	Fenced() bool
}

// pop is one waiter's popping.
type pop struct {
	box      string
	since    time.Time   // the box was empty after this
	out      chan popped // the pop in flight's outcome
	inflight bool
	// failing: the last pop got no answer (no connection from the pool, a
	// dropped one, a timeout). A grant may sit in the box meanwhile, with
	// no message to say so: the waiter re-checks as a stalled one does.
	failing bool
}

type popped struct {
	sent time.Time
	vals []string
	err  error
}

// startPop makes a's waiter pop its hand-off, when its kind can and a
// slot is free. It runs in join, before the attempt that queues the entry.
func (a *acquisition) startPop() {
	h, e := a.h, a.h.e
	pp, ok := h.p.(Popper)
	// The hand-off's TTL is the smaller of the claim window and the
	// waiter's TTL: both must leave room for a whole pop (canPop).
	if !ok || a.lease > 0 || a.ttl < 2*popWait || a.w.Ticket == 0 || !e.canPop() {
		return
	}
	select {
	case e.pops <- struct{}{}:
	default:
		return // waiters beyond PopSlots are woken by messages
	}
	entry, box := pp.PopEntry(a.w.Ticket, a.ttl, h)
	a.q.Entry, a.pop = entry, &pop{box: box, out: make(chan popped, 1)}
}

// canPop reports whether this engine's waiters may pop: a claim window and
// a cleanup timeout that leave room for a whole pop, and a Redis that has
// not refused one.
func (e *Engine) canPop() bool {
	return e.Cfg.SpinMin == 0 && e.Cfg.Claim >= 2*popWait && e.Cfg.CleanupTimeout >= 2*popWait && !e.popOff.Load()
}

// queued starts the pops of a waiter whose attempt sent at sent queued it.
func (a *acquisition) queued(sent time.Time) {
	if a.pop != nil && !a.pop.inflight && a.pop.since.IsZero() {
		a.pop.since = sent
		a.popNext()
	}
}

// popNext sends the next pop, on a goroutine of its own (go-redis cannot
// give up a blocking read when ctx is cancelled; the pop's deadline,
// popWait and popSlack, bounds it).
func (a *acquisition) popNext() { a.popAfter(0) }

// popRetry is how long a pop that got no answer waits before the next.
const popRetry = 100 * time.Millisecond

// popSlack is how much longer than popWait a pop may take, from its call
// to its reply: a round trip, and the wait for a pool connection.
const popSlack = 500 * time.Millisecond

// popAfter is popNext after a pause of d.
func (a *acquisition) popAfter(d time.Duration) {
	p, e := a.pop, a.h.e
	p.inflight = true
	e.Detach(func(ctx context.Context) {
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		sent := time.Now()
		// The whole pop, its wait for a pool connection included, ends
		// popSlack after Redis would have answered it: a pool the
		// application has taken makes the pop fail in time to re-check
		// (stalled) within the claim window, instead of waiting out the
		// pool's timeout while a hand-off sits in the box.
		pctx, cancel := context.WithDeadline(ctx, sent.Add(popWait+popSlack))
		vals, err := e.rdb.BLPop(pctx, popWait, p.box).Result()
		if notify.Tracing && err == nil {
			notify.Trace(e.Cfg.ClientID, notify.HopPopped)
		}
		p.out <- popped{sent: sent, vals: vals, err: err}
		cancel() // after the hand-off reached its waiter: off its way
	})
}

// popC is the channel the pop in flight answers on; nil when none.
func (a *acquisition) popC() <-chan popped {
	if a.pop == nil || !a.pop.inflight {
		return nil
	}
	return a.pop.out
}

// popAnswered handles a pop's outcome: it reports a grant it found (token,
// and the claim window counted from since), or sends the next pop.
func (a *acquisition) popAnswered(r popped) (token uint64, claim time.Duration, ok bool) {
	p, e := a.pop, a.h.e
	p.inflight, p.failing = false, r.err != nil && !errors.Is(r.err, redis.Nil)
	switch {
	case errors.Is(r.err, redis.Nil):
		p.since = r.sent // empty until after it was sent
		a.popNext()
		return 0, 0, false
	case r.err != nil && popRefused(r.err):
		// BLPOP refused (an ACL without @blocking, a renamed command):
		// later waiters are woken by messages. This one's entry still asks
		// for its grant in the box: it re-checks often enough to find a
		// hand-off within its claim window (sleep).
		e.popOff.Store(true)
		e.Cfg.Logger.Warn("dlock: waiters cannot pop their hand-offs; they wait for messages", "err", r.err)
		return 0, 0, false
	case r.err != nil:
		// No answer (a timeout, a dropped connection), or an error that
		// refuses nothing for good (UNBLOCKED when a failover made the
		// server a replica, LOADING, READONLY, TRYAGAIN): the entry still
		// asks for its grant in the box, so pop again, a little later.
		a.popAfter(popRetry)
		return 0, 0, false
	}
	token, claim, err := parseGrant(r.vals, a.h.p.(Popper).Fenced())
	if err == nil && claim > a.ttl {
		// A hand-off's window is the smaller of the claim window and the
		// TTL in the waiter's entry: never more than the waiter's TTL. A
		// longer one was not written by a hand-off, and would put the
		// lease's first renewal, which asks Redis, past it.
		err = fmt.Errorf("dlock: a hand-off of %v, longer than the waiter's TTL %v", claim, a.ttl)
	}
	if err != nil {
		e.Cfg.Logger.Warn("dlock: ignoring a malformed hand-off", "name", a.h.name, "err", err)
		a.popNext()
		return 0, 0, false
	}
	return token, claim, true
}

// popRefused reports whether err, BLPOP's error, says this Redis will never
// run it for this client: the ACL denies it (NOPERM) or the command is
// renamed away (an unknown command).
func popRefused(err error) bool {
	return isRedisError(err) && (redis.HasErrorPrefix(err, "NOPERM") || strings.HasPrefix(err.Error(), "ERR unknown command"))
}

// stalled reports whether a's waiter has a marked entry and no pop that
// will tell it of a hand-off: its pop was refused, or the last one got no
// answer, so a hand-off to it may wait silently in its box until its next
// attempt.
func (a *acquisition) stalled() bool { return a.pop != nil && (!a.pop.inflight || a.pop.failing) }

// parseGrant reads BLPOP's reply [box, "<token> <claim ms>"] strictly: a
// fenced kind's token is at least 1, another kind's is 0.
func parseGrant(vals []string, fenced bool) (uint64, time.Duration, error) {
	if len(vals) != 2 {
		return 0, 0, fmt.Errorf("dlock: unexpected pop reply %q", vals)
	}
	tok, ms, ok := strings.Cut(vals[1], " ")
	t, err1 := strconv.ParseUint(tok, 10, 64)
	c, err2 := strconv.ParseInt(ms, 10, 64)
	if !ok || err1 != nil || err2 != nil || (t >= 1) != fenced || c < 1 {
		return 0, 0, fmt.Errorf("dlock: unexpected hand-off %q", vals[1])
	}
	return t, time.Duration(c) * time.Millisecond, nil
}

// grantPopped turns a popped hand-off into a lease: certain until the
// claim window ends, counted from since, and renewed to its full TTL at
// half the window, which leaves the renewal the other half to come back. A
// grant with less than half its window left (it came late in a pop) is
// confirmed by a renewal first, as a slow reply is (grant).
func (a *acquisition) grantPopped(ctx context.Context, token uint64, claim time.Duration) (bool, error) {
	h, since := a.h, a.pop.since
	validUntil := since.Add(claim - DriftMargin(claim))
	if time.Until(validUntil) < claim/2 {
		sent, err := a.confirmFirst(ctx)
		if err != nil {
			return false, err
		}
		return a.hold(ctx, func() bool { return h.granted(token, sent, a.lease) })
	}
	return a.hold(ctx, func() bool { return h.begin(token, validUntil, since.Add(claim/2), since) })
}

// stopPop ends a waiter's popping: the slot is freed once the pop in
// flight, whose outcome nobody needs any more, is back, and not before: its
// pool connection is taken until then. The pop's deadline (popWait and
// popSlack) bounds the wait.
func (a *acquisition) stopPop() {
	p, e := a.pop, a.h.e
	if p == nil {
		return
	}
	a.pop = nil
	if !p.inflight {
		<-e.pops
		return
	}
	e.Detach(func(context.Context) {
		<-p.out
		<-e.pops
	})
}
