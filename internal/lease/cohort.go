package lease

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/wire"
)

// Passer is implemented by a Protocol whose final release can pass the
// hold straight to a waiter of the same engine (lock cohorting: Dice,
// Marathe and Shavit, PPoPP 2012). The waiter learns of it in process
// memory, where no third party can write, so it needs no claim: the pass is
// one round trip from the release to the next holder, where a hand-off
// through Redis is the release, a message and the waiter's claim.
type Passer interface {
	// CanPass reports whether this handle's kind passes at all (a fair
	// lock, which grants in arrival order across processes, does not).
	CanPass() bool
	// Pass builds the final release of l that makes next the holder, with
	// ttl and a new fencing token, if next's queue entry is still queued.
	Pass(l, next *Lease, entry string, ttl time.Duration) *wire.Call
	// PassReply decodes Pass's reply: the token when passed, else passed
	// false (nothing done: release as usual).
	PassReply(cmd redis.Cmder) (token uint64, passed bool, err error)
}

// MaxPasses bounds how many holds in a row an engine passes among its own
// waiters of one key: the next final release goes through Redis, to the
// head of the wait queue, which is the longest waiting process's (local
// waiters passed a hold leave the queue and queue again at its tail). So
// another process waits for at most MaxPasses holds of this one.
const MaxPasses = 8

// cohort is an engine's waiters that a final release may pass a hold to,
// by lock key, and how many holds of each key were passed in a row.
type cohort struct {
	mu      sync.Mutex
	waiting map[string][]*acquisition
	streak  map[string]int
}

// pass is a hold passed to a waiter: its token and the time before the
// pass was sent, from which its TTL counts.
type pass struct {
	token uint64
	sent  time.Time
}

// enlist makes a, queued in Redis and waiting, one a release may pass to.
func (c *cohort) enlist(a *acquisition) {
	p, ok := a.h.p.(Passer)
	if !ok || !p.CanPass() || a.q.Entry == "" || !a.q.Registered {
		return
	}
	if a.passed == nil {
		a.passed = make(chan pass, 1)
	}
	key := a.h.p.Key()
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.enlisted {
		return
	}
	if c.waiting == nil {
		c.waiting, c.streak = make(map[string][]*acquisition), make(map[string]int)
	}
	c.waiting[key] = append(c.waiting[key], a)
	a.enlisted = true
}

// delist takes a out of the waiters, if it is there.
func (c *cohort) delist(a *acquisition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !a.enlisted {
		return
	}
	a.enlisted = false
	key := a.h.p.Key()
	list := c.waiting[key]
	for i, x := range list {
		if x == a {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.waiting, key)
		return
	}
	c.waiting[key] = list
}

// pick takes the first live waiter for key out of the waiters, for a final
// release of h to pass its hold to: none when the streak of passes is spent
// (the release then goes through Redis, and the streak starts again).
func (c *cohort) pick(h *Lease) *acquisition {
	key := h.p.Key()
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.waiting[key]
	if len(list) == 0 {
		delete(c.streak, key)
		return nil
	}
	if c.streak[key] >= MaxPasses {
		delete(c.streak, key)
		return nil
	}
	for i, a := range list {
		if a.waitCtx.Err() != nil {
			continue // leaving: its entry goes with it
		}
		list = append(list[:i], list[i+1:]...)
		if len(list) == 0 {
			delete(c.waiting, key)
		} else {
			c.waiting[key] = list
		}
		a.enlisted = false
		return a
	}
	return nil
}

// count records a pass of key, or a release that passed nothing.
func (c *cohort) count(key string, passed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if passed {
		c.streak[key]++
	} else {
		delete(c.streak, key)
	}
}

// passTurn is the final release of h (count 1, the caller has its turn)
// passing the hold to next. It reports false, with the turn kept, when the
// pass was not made (the caller then releases as usual); else it has done
// the release's bookkeeping and given the turn back. If ctx ends before the
// reply, the reply is read in the background (passUndo), and a pass that was
// not made is followed there by the usual release.
func (h *Lease) passTurn(ctx context.Context, p Passer, next *acquisition) (bool, error) {
	sent := time.Now()
	cl := p.Pass(h, next.h, next.q.Entry, next.ttl)
	cl.Undo = &passUndo{h: h, p: p, next: next, sent: sent}
	if left, err := h.e.Wire.Do(ctx, cl); left {
		return true, &PendingRelease{Name: h.name, Cause: doneErr(ctx, err)}
	}
	tok, passed, err := p.PassReply(cl.Cmd)
	cl.Free()
	h.e.cohort.count(h.p.Key(), passed && err == nil)
	if err != nil || !passed {
		// Not passed, or not known to be: the usual release decides (a pass
		// that did run left our field gone, which the release reports as
		// our own release, and the waiter finds the lock its own when it
		// next tries).
		return false, nil
	}
	next.tell(pass{token: tok, sent: sent})
	return true, h.releasedAs(Released{Found: true}, nil)
}

// tell hands a waiter the hold passed to it. It never blocks: a waiter is
// passed one hold per wait (it holds the lock from then on, so no release
// of this engine picks it again), and one that already left, or took the
// hold by its own attempt, does not read it.
func (a *acquisition) tell(p pass) {
	select {
	case a.passed <- p:
	default:
	}
}

// passUndo reads a pass's reply after its caller left.
type passUndo struct {
	h    *Lease
	p    Passer
	next *acquisition
	sent time.Time
}

func (u *passUndo) Undo(ctx context.Context, cmd redis.Cmder) {
	h := u.h
	tok, passed, err := u.p.PassReply(cmd)
	h.e.cohort.count(h.p.Key(), passed && err == nil)
	if err == nil && passed {
		u.next.tell(pass{token: tok, sent: u.sent})
		_ = h.releasedAs(Released{Found: true}, nil)
		return
	}
	cl := h.p.Release(h, 1, false)
	if left, err := h.e.Wire.Do(ctx, cl); left {
		_ = h.releasedAs(Released{}, err)
		return
	}
	_ = h.released(cl.Cmd)
	cl.Free()
}
