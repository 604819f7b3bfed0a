// Package contention is dlock's contention benchmark: W goroutines, each with
// a Client of its own (its own connection pool and pub/sub connection), take
// one hot lock K times each and hold it for L. It measures grants per second,
// the wait for each grant, the hand-off gap (from a holder starting its
// release to the next holder's grant, both timestamped in this process), and
// Redis commands per grant. It also checks that no two holders overlap.
//
// The `dlock bench` command prints its Result as a table; the library's own
// benchmarks can call Run too.
package contention

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

// Config describes one benchmark run. The zero value is not usable: Redis
// must be set. A Config is read by Run and not kept.
type Config struct {
	// Redis are the options each worker's go-redis client is made from.
	Redis *redis.Options
	// Workers is the number of goroutines, each with its own Client (W).
	Workers int
	// Grants is how many times each worker takes the lock (K).
	Grants int
	// Hold is how long each grant is held (L); 0 releases at once.
	Hold time.Duration
	// Name is the lock name; empty means a fresh "dlock-bench:<nanos>" (names beginning "dlock:" are dlock's own keys).
	Name string
	// ClientOptions are passed to every dlock.New.
	ClientOptions []dlock.Option
	// NoServerStats skips INFO commandstats (for servers that refuse INFO).
	NoServerStats bool
}

// Result is what Run measured: a plain value, safe to read concurrently.
type Result struct {
	Workers, GrantsPerWorker int
	Hold                     time.Duration
	Grants                   int           // grants taken in total
	Elapsed                  time.Duration // from the first Lock call to the last Unlock
	GrantsPerSec             float64
	WaitP50, WaitP99         time.Duration // from the Lock call to the grant
	GapP50, GapP99           time.Duration // release started → next grant, for waiters already waiting
	Gaps                     int           // number of hand-offs the gap percentiles are taken from
	// CommandsSent is the commands the workers' clients sent (scripts count
	// as one), as counted by a go-redis hook; the pub/sub connection's
	// SUBSCRIBE and UNSUBSCRIBE are not included.
	CommandsSent int64
	SentPerGrant float64
	// ServerCommands is the INFO commandstats delta: every command the
	// server ran meanwhile, commands inside scripts included, and other
	// clients' traffic too. -1 when unavailable.
	ServerCommands int64
	ServerPerGrant float64
}

// ErrOverlap is returned by Run when two holders held the lock at once. It is
// a sentinel for errors.Is; never modified.
var ErrOverlap = errors.New("contention: two holders at once")

// Run runs the benchmark. It returns ctx's error if ctx ends first, and
// ErrOverlap if mutual exclusion was violated. Safe for concurrent use (two
// runs need different names).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Redis == nil || cfg.Workers < 1 || cfg.Grants < 1 || cfg.Hold < 0 {
		return Result{}, fmt.Errorf("%w: need Redis options, Workers >= 1, Grants >= 1, Hold >= 0", dlock.ErrInvalidArgument)
	}
	name := cfg.Name
	if name == "" {
		name = fmt.Sprintf("dlock-bench:%d", time.Now().UnixNano())
	}
	var counter CommandCounter
	rdbs := make([]*redis.Client, cfg.Workers)
	clients := make([]*dlock.Client, cfg.Workers)
	defer func() {
		for i := range clients {
			if clients[i] != nil {
				_ = clients[i].Close()
			}
			if rdbs[i] != nil {
				_ = rdbs[i].Close()
			}
		}
	}()
	for i := range rdbs {
		o := *cfg.Redis
		o.PoolSize = 2
		rdbs[i] = redis.NewClient(&o)
		rdbs[i].AddHook(&counter)
		// Every call through rdbs[i], so that the hook counts them all.
		c, err := dlock.New(rdbs[i], append([]dlock.Option{dlock.WithOwnConnection(false)}, cfg.ClientOptions...)...)
		if err != nil {
			return Result{}, err
		}
		clients[i] = c
	}
	// Warm up: load the scripts and open the connections outside the measure.
	for _, c := range clients {
		m := c.Mutex(name)
		if err := m.Lock(ctx); err != nil {
			return Result{}, err
		}
		if err := m.Unlock(ctx); err != nil {
			return Result{}, err
		}
	}

	admin := redis.NewClient(cfg.Redis)
	defer admin.Close()
	serverBefore := int64(-1)
	if !cfg.NoServerStats {
		if n, err := ServerCommands(ctx, admin); err == nil {
			serverBefore = n
		}
	}
	sentBefore := counter.Count()

	var (
		holders     atomic.Int32
		lastRelease atomic.Int64 // nanoseconds since start
		overlap     atomic.Bool
		mu          sync.Mutex
		waits       = make([]time.Duration, 0, cfg.Workers*cfg.Grants)
		gaps        = make([]time.Duration, 0, cfg.Workers*cfg.Grants)
		firstErr    error
	)
	lastRelease.Store(-1)
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			myWaits := make([]time.Duration, 0, cfg.Grants)
			myGaps := make([]time.Duration, 0, cfg.Grants)
			fail := func(err error) {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
			}
			defer func() {
				mu.Lock()
				waits = append(waits, myWaits...)
				gaps = append(gaps, myGaps...)
				mu.Unlock()
			}()
			for range cfg.Grants {
				m := c.Mutex(name)
				t0 := time.Since(start)
				if err := m.Lock(ctx); err != nil {
					fail(err)
					return
				}
				t1 := time.Since(start)
				if holders.Add(1) != 1 {
					overlap.Store(true)
				}
				myWaits = append(myWaits, t1-t0)
				if rel := time.Duration(lastRelease.Load()); rel >= 0 && t0 < rel {
					myGaps = append(myGaps, t1-rel)
				}
				if cfg.Hold > 0 {
					time.Sleep(cfg.Hold)
				}
				holders.Add(-1)
				lastRelease.Store(int64(time.Since(start)))
				if err := m.Unlock(context.WithoutCancel(ctx)); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Result{}, firstErr
	}
	if overlap.Load() {
		return Result{}, ErrOverlap
	}
	res := Result{
		Workers: cfg.Workers, GrantsPerWorker: cfg.Grants, Hold: cfg.Hold,
		Grants:         len(waits),
		Elapsed:        elapsed,
		GrantsPerSec:   float64(len(waits)) / elapsed.Seconds(),
		WaitP50:        Percentile(waits, 50),
		WaitP99:        Percentile(waits, 99),
		GapP50:         Percentile(gaps, 50),
		GapP99:         Percentile(gaps, 99),
		Gaps:           len(gaps),
		CommandsSent:   counter.Count() - sentBefore,
		ServerCommands: -1,
	}
	res.SentPerGrant = float64(res.CommandsSent) / float64(res.Grants)
	if serverBefore >= 0 {
		if n, err := ServerCommands(context.WithoutCancel(ctx), admin); err == nil {
			res.ServerCommands = n - serverBefore - 1 // the first INFO
			res.ServerPerGrant = float64(res.ServerCommands) / float64(res.Grants)
		}
	}
	return res, nil
}
