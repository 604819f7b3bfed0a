package dlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/lockcheck"
)

// familyHold is one way of taking a lock in a contention test.
type familyHold struct {
	l      Locker
	shared bool          // a read hold
	token  func() uint64 // the hold's fencing token (nil: not checked)
}

// contend has several Clients, several goroutines each, take holds from pick
// over and over. In the critical section no exclusive hold may coexist with
// any other hold; the recorded history must show the same and tokens of
// exclusive holds increasing in grant order.
func contend(t *testing.T, pick func(c *Client, g, i int) familyHold) {
	t.Helper()
	r := testenvRedis(t)
	const clients, perClient, rounds = 4, 4, 8
	ctx := ctxT(t)
	var excl, shared atomic.Int32
	var maxShared atomic.Int32
	var hist lockcheck.History
	var wg sync.WaitGroup
	for ci := range clients {
		c := newClient(t, r)
		for g := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("c%d/g%d", ci, g)
				// Each goroutine's calls carry a context of its own, as
				// each request's would: the read holds of one Client are
				// told apart by it (ErrAmbiguous otherwise).
				ctx := context.WithValue(ctx, ctxName("owner"), owner)
				for i := range rounds {
					h := pick(c, ci*perClient+g, i)
					if err := h.l.Lock(ctx); err != nil {
						t.Errorf("%s: %v", owner, err)
						return
					}
					start := time.Now()
					if h.shared {
						n := shared.Add(1)
						if excl.Load() != 0 {
							t.Errorf("%s: read hold while a write hold is in", owner)
						}
						if n > maxShared.Load() {
							maxShared.Store(n)
						}
					} else if excl.Add(1) != 1 || shared.Load() != 0 {
						t.Errorf("%s: exclusive hold shared with another", owner)
					}
					time.Sleep(time.Duration(i%3) * time.Millisecond)
					if h.shared {
						shared.Add(-1)
					} else {
						excl.Add(-1)
					}
					var tok uint64
					if h.token != nil {
						tok = h.token()
					}
					hist.Add(lockcheck.Hold{Owner: owner, Shared: h.shared, Token: tok, Start: start, End: time.Now()})
					if err := h.l.Unlock(ctx); err != nil {
						t.Errorf("%s: Unlock: %v", owner, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if got, want := hist.Len(), clients*perClient*rounds; got != want {
		t.Fatalf("%d holds recorded, want %d", got, want)
	}
	if err := hist.Check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d holds, at most %d read holds at once", hist.Len(), maxShared.Load())
}

func TestContentionFair(t *testing.T) {
	contend(t, func(c *Client, g, i int) familyHold {
		m := c.FairMutex("hot:fair")
		return familyHold{l: m, token: m.Token}
	})
}
