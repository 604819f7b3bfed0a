package lease

import (
	"context"
	"sync"
	"time"
)

// gate admits one goroutine at a time, first come first served, and lets a
// waiter give up when its ctx is done. Unlike a channel of capacity one it
// allocates nothing until a second goroutine has to wait, which is rare:
// handles are gates, and most handles live for one acquisition.
//
// The holder may hand the gate to its first waiter with a baton: the Redis
// hold itself, passed in one script (Passer), so the waiter holds without
// an acquisition of its own. Such a waiter is reserved (taken out of the
// queue) while the pass is in flight.
type gate struct {
	mu      sync.Mutex
	held    bool
	waiters []*gateWaiter // FIFO; the gate is handed to the first
	inRow   int           // passes made in a row (Passer.Pass's inRow)
}

// gateWaiter is one goroutine waiting at a gate.
type gateWaiter struct {
	ch chan baton // receives the gate
	// next is the lease the waiter will take and ttl its first TTL, for a
	// pass (nil: the waiter takes no pass).
	next *Lease
	ttl  time.Duration
	// lease is the waiter's fixed lease, 0 for a hold the watchdog renews:
	// only such a waiter takes a hold passed in memory, which goes on with
	// the releaser's renewal (a fixed lease as long as the watchdog's TTL
	// would otherwise be renewed past its end).
	lease time.Duration
	// abandoned, when set, is run on a goroutine of its own with the
	// baton of a waiter whose ctx ended after it was reserved: it must
	// undo what the baton grants and leave the gate (exit).
	abandoned func(baton)
}

// baton is what comes with the gate: the hold passed to the waiter (pass.go),
// or a zero token for the gate alone.
type baton struct {
	token uint64
	spare [2]uint64 // the tokens it may hand out itself: first, last
	// A pass in Redis: when it was sent, which the lease counts from.
	sent time.Time
	// A pass in memory: the hold's field and when it stops being certain,
	// and the check of the hold that its releaser sent as it handed it on
	// (passCheck), not yet answered perhaps.
	field      string
	validUntil time.Time
	check      *passCheck
	// mayHold marks a gate without a token after a pass in Redis whose
	// outcome is unknown (no answer, or an answer that the releaser's
	// field was gone: the pass's own first send, resent, may have made
	// it): the waiter may hold in Redis, and one that leaves must undo
	// it, as for a baton with a token.
	mayHold bool
}

// grants reports whether b may carry a hold in Redis that a waiter who
// leaves must undo.
func (b baton) grants() bool { return b.token != 0 || b.mayHold }

// tryEnter takes the gate if it is free.
func (g *gate) tryEnter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held {
		return false
	}
	g.held = true
	return true
}

// enter takes the gate, waiting until it is handed over or ctx is done.
func (g *gate) enter(ctx context.Context) error {
	_, err := g.enterAs(ctx, &gateWaiter{})
	return err
}

// enterAs is enter for w, and returns the baton that came with the gate.
func (g *gate) enterAs(ctx context.Context, w *gateWaiter) (baton, error) {
	g.mu.Lock()
	if !g.held {
		g.held = true
		g.mu.Unlock()
		return baton{}, nil
	}
	w.ch = make(chan baton, 1)
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	select {
	case b := <-w.ch:
		return b, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	for i, x := range g.waiters {
		if x == w {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			g.mu.Unlock()
			return baton{}, context.Cause(ctx)
		}
	}
	g.mu.Unlock()
	// Handed over or reserved just as ctx ended: whatever comes with the
	// gate is given back, without keeping the caller (a pass's reply may
	// be on its way from a Redis that does not answer).
	select {
	case b := <-w.ch:
		if !b.grants() || w.abandoned == nil {
			g.exit()
			return baton{}, context.Cause(ctx)
		}
		go w.abandoned(b)
	default:
		if w.abandoned != nil {
			go func() { w.abandoned(<-w.ch) }()
		} else {
			go func() { <-w.ch; g.exit() }()
		}
	}
	return baton{}, context.Cause(ctx)
}

// waited reports whether a goroutine waits at the gate.
func (g *gate) waited() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiters) > 0
}

// exit hands the gate to the first waiter, or frees it.
func (g *gate) exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inRow = 0
	if len(g.waiters) == 0 {
		g.held = false
		return
	}
	w := g.waiters[0]
	g.waiters[0] = nil
	g.waiters = g.waiters[1:]
	w.ch <- baton{}
}

// reserve takes the first waiter out of the queue, for the holder to pass
// it the hold, when it can take one; it returns nil when nobody waits, and
// the passes made in a row. The holder then hands the gate over (handOver)
// or puts the waiter back (putBack).
func (g *gate) reserve() (*gateWaiter, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiters) == 0 || g.waiters[0].next == nil {
		return nil, 0
	}
	w := g.waiters[0]
	g.waiters[0] = nil
	g.waiters = g.waiters[1:]
	return w, g.inRow
}

// handOver gives the gate to the reserved w with b.
func (g *gate) handOver(w *gateWaiter, b baton) {
	g.mu.Lock()
	if b.token != 0 {
		g.inRow++
	} else {
		g.inRow = 0
	}
	g.mu.Unlock()
	w.ch <- b
}

// putBack returns the reserved w to the head of the queue: the holder goes
// on holding.
func (g *gate) putBack(w *gateWaiter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiters = append(g.waiters, nil)
	copy(g.waiters[1:], g.waiters)
	g.waiters[0] = w
}
