package dlock

import (
	"fmt"
	"github.com/dlock-dev/dlock/internal/wire"
	"sync"
	"testing"
)

// Concurrent calls of one Client share round trips: however many goroutines
// lock and unlock at once, the Client's calls use at most one connection of
// the go-redis client per batch worker, where a call per connection would
// open the pool's whole size. That holds for the calls the pipe hands back
// too (the first use of each script, answered NOSCRIPT on the pipe).
func TestConcurrentCallsShareRoundTrips(t *testing.T) {
	rdb := rdbFor(t, shared)
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				m := c.Mutex(fmt.Sprintf("batch:%d", i))
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := rdb.PoolStats().TotalConns; n > wire.Workers {
		t.Fatalf("64 goroutines' calls used %d connections, want at most %d (one per batch worker)", n, wire.Workers)
	}
}
