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
