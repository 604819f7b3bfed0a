// Package demo is the seeds' first-come coupon issuance, run by `dlock demo`.
//
// N simulated app servers, each with its own go-redis client (its own
// connection pool) and its own dlock Client, race their workers to issue a
// limited stock of coupons. Issuing is a read-check-write on Redis: GET the
// remaining stock, think for a moment (a millisecond, as a real service
// would spend checking the user), then SET the stock one lower and RPUSH the
// request to the issued list. Without the lock the reads race and the event
// oversells; with it (WithLock on coupon:issue:<event>) it never does.
//
// Without a Redis URL the demo runs on an embedded miniredis whose clock is
// driven in real time, so lock TTLs and the watchdog behave as on a server.
package demo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/cmd/dlock/internal/contention"
	"github.com/dlock-dev/dlock/internal/keys"
)

// Config describes one demo run. Zero sizes take the defaults below. A
// Config is read by Run and not kept; its callbacks must be safe for
// concurrent use.
type Config struct {
	Servers  int // simulated app servers, each with its own Client (default 3)
	Workers  int // concurrent workers per server (default 8)
	Stock    int // coupons to issue (default 100)
	Requests int // issue requests in total (default 300)
	NoLock   bool
	// Fair takes a FairMutex instead of a Mutex: requests are served in the
	// order they arrived at Redis, first come first served across servers.
	Fair bool
	// Redis, when set, are the options of a real Redis to run against; nil
	// runs on an embedded miniredis.
	Redis *redis.Options
	// Think is the pause between reading the stock and writing it back
	// (default 1ms): the window in which unlocked requests race.
	Think time.Duration
	// Wait is how long a request waits for the lock (default 10s, WithLock's).
	Wait time.Duration
	// ClientOptions are passed to every dlock.New (e.g. an Observer).
	ClientOptions []dlock.Option
	// Progress, when set, is called after each request with the number done,
	// from the workers concurrently: calls may come out of order.
	Progress func(done int)
}

// Defaults for Config's zero fields (constants: safe for concurrent use).
const (
	DefaultServers  = 3
	DefaultWorkers  = 8
	DefaultStock    = 100
	DefaultRequests = 300
	DefaultThink    = time.Millisecond
)

// Result is what a run reports. It is a plain value; its methods only read
// it and are safe for concurrent use.
type Result struct {
	Backend  string // "embedded" or the Redis address
	Locked   bool   // whether requests took the lock
	Stock    int
	Issued   int // coupons issued (entries in the issued list)
	Oversold int // issued beyond the stock
	Requests int
	Rejected int // requests answered "sold out" or not served within the wait
	TimedOut int // of Rejected, the requests whose lock wait ran out
	Errors   int // requests that failed otherwise (counted in neither)
	WaitP50  time.Duration
	WaitP99  time.Duration
	Elapsed  time.Duration
	// CommandsSent counts commands sent by the servers' clients (a script
	// call is one command), from a go-redis hook on every client.
	CommandsSent int64
	// ServerCommands is the INFO commandstats delta on a real Redis
	// (commands inside scripts counted, other clients' traffic too); -1 on
	// the embedded Redis, which has no commandstats.
	ServerCommands int64
}

// CommandsPerIssue is CommandsSent per coupon issued (0 when none was).
// Safe for concurrent use.
func (r Result) CommandsPerIssue() float64 {
	if r.Issued == 0 {
		return 0
	}
	return float64(r.CommandsSent) / float64(r.Issued)
}

// ServerCommandsPerIssue is ServerCommands per coupon issued, or -1 when
// unknown. Safe for concurrent use.
func (r Result) ServerCommandsPerIssue() float64 {
	if r.ServerCommands < 0 {
		return -1
	}
	if r.Issued == 0 {
		return 0
	}
	return float64(r.ServerCommands) / float64(r.Issued)
}

// Validate fills in defaults and rejects nonsensical sizes. It modifies c:
// not safe for concurrent use with other uses of c.
func (c *Config) Validate() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Servers, DefaultServers)
	def(&c.Workers, DefaultWorkers)
	def(&c.Stock, DefaultStock)
	def(&c.Requests, DefaultRequests)
	if c.Think == 0 {
		c.Think = DefaultThink
	}
	if c.Wait == 0 {
		c.Wait = dlock.DefaultWaitTime
	}
	switch {
	case c.Servers < 1 || c.Servers > 1000:
		return fmt.Errorf("%w: servers must be 1 to 1000, not %d", dlock.ErrInvalidArgument, c.Servers)
	case c.Workers < 1 || c.Workers > 10000:
		return fmt.Errorf("%w: workers must be 1 to 10000, not %d", dlock.ErrInvalidArgument, c.Workers)
	case c.Stock < 0:
		return fmt.Errorf("%w: stock must not be negative", dlock.ErrInvalidArgument)
	case c.Requests < 0:
		return fmt.Errorf("%w: requests must not be negative", dlock.ErrInvalidArgument)
	case c.Fair && c.NoLock:
		return fmt.Errorf("%w: fair and no-lock exclude each other", dlock.ErrInvalidArgument)
	case c.Think < 0 || c.Wait < 0:
		return fmt.Errorf("%w: negative duration", dlock.ErrInvalidArgument)
	}
	return nil
}

// issueFair is WithLock for a FairMutex: wait for the lock, note the grant,
// run fn, always release.
func issueFair(ctx context.Context, m *dlock.FairMutex, wait time.Duration, granted func(), fn func(context.Context) (bool, error)) (bool, error) {
	ok, err := m.TryLock(ctx, wait, 0)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, fmt.Errorf("%w: %q not acquired within %v", dlock.ErrWaitTimeout, m.Name(), wait)
	}
	granted()
	issued, ferr := fn(ctx)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	uerr := m.Unlock(uctx)
	if ferr != nil {
		return issued, ferr
	}
	return issued, uerr
}

// Embedded is an in-process miniredis whose clock follows real time. Addr is
// safe for concurrent use; Close must be called once, after the last use.
type Embedded struct {
	srv  *miniredis.Miniredis
	stop chan struct{}
	done chan struct{}
}

// StartEmbedded starts a miniredis on a free loopback port and a goroutine
// that advances its clock (TTLs) in real time. Close stops both. Safe for
// concurrent use.
func StartEmbedded() (*Embedded, error) {
	s := miniredis.NewMiniRedis()
	if err := s.Start(); err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	e := &Embedded{srv: s, stop: make(chan struct{}), done: make(chan struct{})}
	go e.clock()
	return e, nil
}

// clock feeds the real time that passed to miniredis, whose TTLs otherwise
// only move when told.
func (e *Embedded) clock() {
	defer close(e.done)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-e.stop:
			return
		case now := <-t.C:
			e.srv.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Addr returns the embedded server's "127.0.0.1:port". Safe for concurrent use.
func (e *Embedded) Addr() string { return e.srv.Addr() }

// Close stops the clock and the server. Call it once; not safe for
// concurrent use with itself.
func (e *Embedded) Close() {
	close(e.stop)
	<-e.done
	e.srv.Close()
}

// Options returns go-redis options for addr as the demo uses them. It
// returns a new value on each call; safe for concurrent use.
func Options(addr string) *redis.Options {
	return &redis.Options{Addr: addr}
}

func prepare(o *redis.Options) *redis.Options {
	c := *o
	c.DisableIdentity = true
	c.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if c.PoolSize == 0 {
		c.PoolSize = 16
	}
	return &c
}

// Run runs the demo. It returns ctx's error when ctx ends first. Safe for
// concurrent use: every run uses keys of its own.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{Locked: !cfg.NoLock, Stock: cfg.Stock, Requests: cfg.Requests, ServerCommands: -1}
	var opts *redis.Options
	if cfg.Redis == nil {
		emb, err := StartEmbedded()
		if err != nil {
			return Result{}, err
		}
		defer emb.Close()
		opts = prepare(Options(emb.Addr()))
		res.Backend = "embedded"
	} else {
		opts = prepare(cfg.Redis)
		res.Backend = opts.Addr
	}

	event := "demo-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	lockName := "coupon:issue:" + event
	stockKey := "coupon:{" + event + "}:stock"
	issuedKey := "coupon:{" + event + "}:issued"

	admin := redis.NewClient(opts)
	defer admin.Close()
	if err := admin.Set(ctx, stockKey, cfg.Stock, time.Hour).Err(); err != nil {
		return Result{}, fmt.Errorf("setting up the stock: %w", err)
	}
	defer func() {
		ks := keys.For(lockName)
		_ = admin.Del(context.WithoutCancel(ctx), stockKey, issuedKey, ks.Fence, keys.FenceStart(ks.Fence), ks.Queue, ks.Forced).Err()
	}()

	var counter contention.CommandCounter
	servers := make([]*dlock.Client, cfg.Servers)
	rdbs := make([]*redis.Client, cfg.Servers)
	defer func() {
		for i := range servers {
			if servers[i] != nil {
				_ = servers[i].Close()
			}
			if rdbs[i] != nil {
				_ = rdbs[i].Close()
			}
		}
	}()
	for i := range servers {
		rdbs[i] = redis.NewClient(opts)
		rdbs[i].AddHook(&counter)
		// Every call through rdbs[i], so that the hook counts them all.
		c, err := dlock.New(rdbs[i], append([]dlock.Option{dlock.WithOwnConnection(false)}, cfg.ClientOptions...)...)
		if err != nil {
			return Result{}, err
		}
		servers[i] = c
	}

	serverBefore := int64(-1)
	if cfg.Redis != nil {
		if n, err := contention.ServerCommands(ctx, admin); err == nil {
			serverBefore = n
		}
	}
	sentBefore := counter.Count()

	var (
		next     atomic.Int64
		done     atomic.Int64
		rejected atomic.Int64
		timedOut atomic.Int64
		failed   atomic.Int64
		mu       sync.Mutex
		waits    = make([]time.Duration, 0, cfg.Requests)
		firstErr error
	)
	issue := func(ctx context.Context, rdb *redis.Client, id int64) (bool, error) {
		left, err := rdb.Get(ctx, stockKey).Int()
		if err != nil {
			return false, err
		}
		if left <= 0 {
			return false, nil
		}
		time.Sleep(cfg.Think) // checking the user, the event's rules, ...
		if err := rdb.Set(ctx, stockKey, left-1, time.Hour).Err(); err != nil {
			return false, err
		}
		return true, rdb.RPush(ctx, issuedKey, id).Err()
	}

	start := time.Now()
	var wg sync.WaitGroup
	for s := range servers {
		c, rdb := servers[s], rdbs[s]
		for range cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				defer func() {
					mu.Lock()
					waits = append(waits, mine...)
					mu.Unlock()
				}()
				for {
					id := next.Add(1)
					if id > int64(cfg.Requests) || ctx.Err() != nil {
						return
					}
					var ok bool
					var err error
					switch {
					case cfg.NoLock:
						ok, err = issue(ctx, rdb, id)
					case cfg.Fair:
						t0 := time.Now()
						ok, err = issueFair(ctx, c.FairMutex(lockName), cfg.Wait, func() { mine = append(mine, time.Since(t0)) },
							func(ctx context.Context) (bool, error) { return issue(ctx, rdb, id) })
					default:
						t0 := time.Now()
						err = c.WithLock(ctx, lockName, func(ctx context.Context) error {
							mine = append(mine, time.Since(t0))
							var ierr error
							ok, ierr = issue(ctx, rdb, id)
							return ierr
						}, dlock.WaitTime(cfg.Wait))
					}
					switch {
					case errors.Is(err, dlock.ErrWaitTimeout):
						rejected.Add(1)
						timedOut.Add(1)
					case err != nil:
						failed.Add(1)
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					case !ok:
						rejected.Add(1)
					}
					d := done.Add(1)
					if cfg.Progress != nil {
						cfg.Progress(int(d))
					}
				}
			}()
		}
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	res.CommandsSent = counter.Count() - sentBefore
	if serverBefore >= 0 {
		if n, err := contention.ServerCommands(ctx, admin); err == nil {
			res.ServerCommands = n - serverBefore - 1 // the first INFO
		}
	}
	issued, err := admin.LLen(ctx, issuedKey).Result()
	if err != nil {
		return Result{}, fmt.Errorf("counting issued coupons: %w", err)
	}
	res.Issued = int(issued)
	res.Oversold = max(res.Issued-cfg.Stock, 0)
	res.Rejected = int(rejected.Load())
	res.TimedOut = int(timedOut.Load())
	res.Errors = int(failed.Load())
	res.WaitP50 = contention.Percentile(waits, 50)
	res.WaitP99 = contention.Percentile(waits, 99)
	if firstErr != nil {
		return res, fmt.Errorf("%d of %d requests failed, the first with: %w", res.Errors, cfg.Requests, firstErr)
	}
	return res, nil
}
