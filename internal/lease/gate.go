package lease

import (
	"context"
	"sync"
)

// gate admits one goroutine at a time, first come first served, and lets a
// waiter give up when its ctx is done. Unlike a channel of capacity one it
// allocates nothing until a second goroutine has to wait, which is rare:
// handles are gates, and most handles live for one acquisition.
type gate struct {
	mu      sync.Mutex
	held    bool
	waiters []chan struct{} // FIFO; the gate is handed to the first
}

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
	g.mu.Lock()
	if !g.held {
		g.held = true
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{}, 1)
	g.waiters = append(g.waiters, ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	for i, w := range g.waiters {
		if w == ch {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			g.mu.Unlock()
			return context.Cause(ctx)
		}
	}
	g.mu.Unlock()
	// Handed over just as ctx ended: pass it on.
	<-ch
	g.exit()
	return context.Cause(ctx)
}

// exit hands the gate to the first waiter, or frees it.
func (g *gate) exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiters) == 0 {
		g.held = false
		return
	}
	ch := g.waiters[0]
	g.waiters[0] = nil
	g.waiters = g.waiters[1:]
	ch <- struct{}{}
}
