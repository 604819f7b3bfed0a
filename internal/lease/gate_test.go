package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The gate admits one goroutine at a time, and a waiter that gives up
// neither enters nor loses the gate for the others.
func TestGateExcludesAndSurvivesGivingUp(t *testing.T) {
	var g gate
	var in, max atomic.Int32
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				ctx := context.Background()
				var cancel context.CancelFunc = func() {}
				if (i+j)%5 == 0 {
					ctx, cancel = context.WithCancel(ctx)
					go cancel() // gives up at some point while waiting, or not
				}
				err := g.enter(ctx)
				cancel()
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						t.Error(err)
					}
					continue
				}
				n := in.Add(1)
				for {
					m := max.Load()
					if n <= m || max.CompareAndSwap(m, n) {
						break
					}
				}
				in.Add(-1)
				g.exit()
			}
		}()
	}
	wg.Wait()
	if max.Load() != 1 {
		t.Fatalf("%d goroutines inside at once", max.Load())
	}
	if !g.tryEnter() {
		t.Fatal("the gate is held after everyone left")
	}
	if g.tryEnter() {
		t.Fatal("tryEnter entered a held gate")
	}
	g.exit()
}

// Waiters are let in in arrival order.
func TestGateIsFIFO(t *testing.T) {
	var g gate
	if !g.tryEnter() {
		t.Fatal("a new gate is held")
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if err := g.enter(context.Background()); err != nil {
				t.Error(err)
				return
			}
			order <- i
			g.exit()
		}()
		// Wait until waiter i is queued before starting the next.
		for deadline := time.Now().Add(10 * time.Second); ; {
			g.mu.Lock()
			n := len(g.waiters)
			g.mu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	g.exit()
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("waiter %d entered before waiter %d", got, want)
		}
	}
}

// A waiter that leaves as the gate is handed to it after a pass in Redis
// whose outcome is unknown (mayHold, no token) undoes what the pass may
// have granted it, as for a baton with a token; without the mark it only
// passes the gate on. (handle.go's abandoned undoes when the baton grants.)
func TestGateLeavingWaiterUndoesAMaybePass(t *testing.T) {
	for _, b := range []baton{{mayHold: true}, {token: 7}, {}} {
		var g gate
		if !g.tryEnter() {
			t.Fatal("a free gate was not entered")
		}
		undone := make(chan baton, 1)
		w := &gateWaiter{next: &Lease{}, abandoned: func(b baton) {
			if b.grants() {
				undone <- b
			}
			g.exit()
		}}
		ctx, cancel := context.WithCancel(context.Background())
		entered := make(chan error, 1)
		go func() { _, err := g.enterAs(ctx, w); entered <- err }()
		var r *gateWaiter
		for deadline := time.Now().Add(5 * time.Second); r == nil; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the waiter never queued at the gate")
			}
			r, _ = g.reserve()
		}
		cancel()
		if err := <-entered; !errors.Is(err, context.Canceled) {
			t.Fatalf("enterAs = %v, want its ctx's end", err)
		}
		g.handOver(r, b) // the baton comes after the waiter left
		select {
		case <-undone:
		case <-time.After(time.Second):
			if b.grants() {
				t.Fatalf("baton %+v: the leaving waiter did not undo what it may hold", b)
			}
		}
		for deadline := time.Now().Add(5 * time.Second); !g.tryEnter(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("baton %+v: the gate is still held after the waiter left", b)
			}
		}
	}
}
