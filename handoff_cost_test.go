package dlock

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A contended hand-off costs a semaphore no more Redis commands than it
// costs a Mutex (issue 30): 20 waiters in 20 Clients take the one permit
// (the lock) 3 times each, holding it 1 ms; every command Redis runs
// (INFO commandstats, commands inside scripts included) is counted over
// the 60 grants, after a warm-up that loaded the scripts, subscribed the
// channels and let the Clients' first-contact checks finish. A grant is the
// release, the next waiter's pop of its grant (no claim: two scripts per
// grant) and the former holder's queueing call: a Mutex's scripts do it in
// 15 commands, a semaphore's in about 18.5; the bound is 20 for both.
func TestHandoffCommandsPerGrant(t *testing.T) {
	const waiters, rounds = 20, 3
	kinds := []struct {
		name string
		take func(c *Client, ctx context.Context) (func(context.Context) error, error)
	}{
		{"mutex", func(c *Client, ctx context.Context) (func(context.Context) error, error) {
			m := c.Mutex("cost:hot")
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return m.Unlock, nil
		}},
		{"semaphore", func(c *Client, ctx context.Context) (func(context.Context) error, error) {
			p, err := c.Semaphore("cost:hot", 1).Acquire(ctx, 20*time.Second, 0)
			if err != nil {
				return nil, err
			}
			return p.Release, nil
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			r := testenvRedis(t)
			ctx := ctxT(t)
			clients := make([]*Client, waiters)
			for i := range clients {
				clients[i] = newClient(t, r)
			}
			run := func(n int) {
				var wg sync.WaitGroup
				for _, c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n {
							release, err := k.take(c, ctx)
							if err != nil {
								t.Error(err)
								return
							}
							time.Sleep(time.Millisecond)
							if err := release(ctx); err != nil {
								t.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			run(1)
			quiet(t, r)
			if err := r.ResetStats(ctx); err != nil {
				t.Fatal(err)
			}
			run(rounds)
			if t.Failed() {
				return
			}
			stats := dataCommands(t, r)
			delete(stats, "info")
			var total int64
			names := make([]string, 0, len(stats))
			for name, n := range stats {
				total += n
				names = append(names, name)
			}
			sort.Slice(names, func(i, j int) bool { return stats[names[i]] > stats[names[j]] })
			grants := float64(waiters * rounds)
			per := float64(total) / grants
			t.Logf("%s: %.1f commands per grant over %d grants; by command: %v (first: %v)", k.name, per, waiters*rounds, stats, names[:min(4, len(names))])
			if per > 20 {
				t.Fatalf("%s: %.1f commands per grant, want at most 20 (a Mutex's count): %v", k.name, per, stats)
			}
			if scripts := float64(stats["evalsha"]+stats["eval"]) / grants; scripts > 2.2 {
				t.Errorf("%s: %.2f scripts per grant, want 2 (the release and the queueing call; the waiter pops its grant): %v", k.name, scripts, stats)
			}
		})
	}
}

// quiet waits until Redis has run nothing but the test's own polls for
// 100 ms (the Clients' one-time first-contact checks are over).
func quiet(t *testing.T, r *testenv.Redis) {
	t.Helper()
	ctx := context.Background()
	var last int64 = -1
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		stats, err := r.CommandStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for name, c := range stats {
			if name != "info" {
				n += c
			}
		}
		if n == last {
			return
		}
		last = n
		time.Sleep(100 * time.Millisecond)
	}
}
