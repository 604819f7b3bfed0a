package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/renew"
)

// Client hands out lock handles that share one Redis client, one pub/sub
// connection and one watchdog. A Client is safe for concurrent use; create one
// per process (per Redis deployment) and Close it on shutdown.
type Client struct {
	rdb     redis.UniversalClient
	cfg     config
	id      string
	hub     *notify.Hub
	renewer *renew.Renewer
	batch   *batcher
	// deadlines declares holds lost whose local deadline passes unrenewed.
	deadlines *deadlines
	arg       scriptArgs
	owners    atomic.Uint64 // numbers owner fields: one per hold, never reused
	closed    atomic.Bool

	fallback *tiers // WithFallback; nil without

	background tasks // detached calls and cleanups, for Close

	mu     sync.Mutex
	holds  map[*hold]struct{}            // every live hold, for Close
	byLock map[string]map[*hold]struct{} // the same, by lock key, for forced (push of ForceUnlock)

	others map[closer]struct{} // live permits and observers, for Close; guarded by mu
}

// scriptArgs are script arguments that never change for a Client, converted
// to interfaces once rather than on every call.
type scriptArgs struct {
	watchdogMs, queueTTLMs, fenceTTLMs, claimMs any
	writerWaitMs                                any // how long a waiting writer holds readers back unless it re-checks
}

// New returns a Client that locks through rdb (a *redis.Client, a Sentinel
// failover client or a *redis.ClusterClient). It makes no network call; rdb
// stays owned by the caller and is not closed by Close.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidArgument)
	}
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidArgument, i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.clientID == "" {
		cfg.clientID = defaultClientID()
	}
	c := &Client{
		rdb:    rdb,
		cfg:    cfg,
		id:     cfg.clientID,
		holds:  make(map[*hold]struct{}),
		byLock: make(map[string]map[*hold]struct{}),
		arg: scriptArgs{
			watchdogMs:   ms(cfg.watchdog),
			queueTTLMs:   ms(4 * cfg.recheck),
			fenceTTLMs:   ms(cfg.fenceTTL),
			claimMs:      ms(cfg.claim),
			writerWaitMs: ms(cfg.recheck + cfg.claim),
		},
	}
	c.batch = newBatcher(rdb, c.abandoned)
	c.deadlines = newDeadlines((*hold).checkDeadline)
	c.hub = notify.New(rdb, notify.Config{
		ClientChannel: keys.ClientChannel(c.id),
		Linger:        cfg.linger,
		ReadyTimeout:  cfg.recheck,
		CloseWait:     cfg.closeTimeout,
		Forced:        c.forced,
		Log:           cfg.logger,
	})
	var slot func(string) uint16
	if _, ok := rdb.(*redis.ClusterClient); ok {
		slot = keys.Slot
	}
	c.renewer = renew.New(renew.Config{
		Period: cfg.watchdog / 3,
		Run:    c.renewBatch,
		Slot:   slot,
		Failed: func(n int, err error) {
			cfg.logger.Warn("dlock: renewal failed; will retry", "locks", n, "err", err)
			if c.fallback != nil && isInfrastructure(err) {
				c.fallback.redisFailed() // holders too must see the outage
			}
			for _, o := range cfg.observers {
				o.Renewed(n, err)
			}
		},
		Batched: func(n int) {
			if c.fallback != nil {
				c.fallback.reachedRedis()
			}
			for _, o := range cfg.observers {
				o.Renewed(n, nil)
			}
		},
	})
	if cfg.fallback != nil {
		c.fallback = newTiers(c)
	}
	return c, nil
}

// ID returns the client id that prefixes this client's owner fields.
func (c *Client) ID() string { return c.id }

// Close stops the watchdog, wakes every waiter with ErrClosed, tells every
// holder that its hold ended (Done closes, Err and the hold's context's cause
// wrap ErrLockLost and ErrClosed), releases the locks the client still holds,
// closes the pub/sub connection and waits for background cleanups, all within
// the close timeout (WithCloseTimeout, default 5s) whatever Redis does. Locks
// it could not release expire by their TTL. Close is idempotent and safe to
// call concurrently with lock operations, which then fail with ErrClosed.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	deadline := time.Now().Add(c.cfg.closeTimeout)
	c.renewer.Stop()

	c.mu.Lock()
	holds := make([]*hold, 0, len(c.holds))
	for h := range c.holds {
		holds = append(holds, h)
	}
	others := make([]closer, 0, len(c.others))
	for o := range c.others {
		others = append(others, o)
	}
	c.mu.Unlock()
	// Holders learn first that their holds end, then the locks are released
	// for others, each release detached and all of them within the budget.
	released := make(chan error, len(holds)+len(others))
	for _, h := range holds {
		h.lose(lossError(h.name, ErrClosed, nil))
		c.detach(func(ctx context.Context) {
			released <- h.releaseAll(ctx)
		})
	}
	for _, o := range others {
		c.detach(func(ctx context.Context) { released <- o.closeWith(ctx) })
	}
	var errs []error
	budget, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Last, whatever happens: the batcher's workers end once its queue is
	// empty; later calls (cleanups that outlive the budget) go out on
	// goroutines of their own.
	defer c.batch.stop()
	defer c.deadlines.stop()
	for range len(holds) + len(others) {
		select {
		case err := <-released:
			if err != nil {
				errs = append(errs, err)
			}
		case <-budget.Done():
			errs = append(errs, fmt.Errorf("dlock: close timeout: some locks were left to expire by their TTL"))
			return errors.Join(errs...)
		}
	}
	if err := c.hub.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		errs = append(errs, err)
	}
	select {
	case <-c.background.idle():
	case <-budget.Done():
	}
	// Calls whose callers left are completed (and undone) before the
	// workers end, within the budget too.
	select {
	case <-c.batch.drain():
	case <-budget.Done():
	}
	return errors.Join(errs...)
}

// track registers a live hold for Close; it refuses (false) once Close has
// begun, so that no hold escapes Close's release.
func (c *Client) track(h *hold) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.holds[h] = struct{}{}
	byLock := c.byLock[h.ks.Lock]
	if byLock == nil {
		byLock = make(map[*hold]struct{}, 1)
		c.byLock[h.ks.Lock] = byLock
	}
	byLock[h] = struct{}{}
	return true
}

func (c *Client) untrack(h *hold) {
	c.mu.Lock()
	delete(c.holds, h)
	if byLock := c.byLock[h.ks.Lock]; byLock != nil {
		delete(byLock, h)
		if len(byLock) == 0 {
			delete(c.byLock, h.ks.Lock)
		}
	}
	c.mu.Unlock()
}

// detach runs f on a goroutine of its own with a context that ends after the
// cleanup timeout, counted for Close. It is how work that must outlive its
// caller's ctx (a release, leaving a queue) is done.
func (c *Client) detach(f func(ctx context.Context)) {
	c.background.add()
	go func() {
		defer c.background.done()
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.cleanupTimeout)
		defer cancel()
		f(ctx)
	}()
}

// roundTrip runs call and returns its result, or returns at once with
// ctx's cause (left true) when ctx is done first, whatever Redis does: call
// then goes on in the background and, once it returns, abandoned (if not
// nil) undoes what it may have done. go-redis honours a context's deadline
// only with ContextTimeoutEnabled, so without this a call to a Redis that
// accepts and never answers would keep the caller for its read timeout times
// its retries.
func roundTrip[T any](c *Client, ctx context.Context, call func(context.Context) (T, error), abandoned func(context.Context, T, error)) (v T, left bool, err error) {
	if ctx.Done() == nil {
		v, err = call(ctx)
		return v, false, err
	}
	if ctx.Err() != nil {
		return v, true, context.Cause(ctx)
	}
	type result struct {
		v   T
		err error
	}
	var state atomic.Int32 // 0 waiting, 1 answered, 2 the caller left
	got := make(chan result, 1)
	c.background.add()
	go func() {
		defer c.background.done()
		v, err := call(context.WithoutCancel(ctx))
		if state.CompareAndSwap(0, 1) {
			got <- result{v, err}
			return
		}
		if abandoned != nil {
			cctx, cancel := context.WithTimeout(context.Background(), c.cfg.cleanupTimeout)
			defer cancel()
			abandoned(cctx, v, err)
		}
	}()
	select {
	case r := <-got:
		return r.v, false, r.err
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			return v, true, context.Cause(ctx)
		}
		r := <-got // answered just now
		return r.v, false, r.err
	}
}

func (c *Client) renewBatch(ctx context.Context, batch []*renew.Entry, ttls []int64) ([]int64, error) {
	keyArgs := make([]any, 0, 4*len(batch))
	args := make([]any, 3*len(batch))
	n := len(batch)
	for i, e := range batch {
		set := e.Set
		if set == "" {
			set = e.Key
		}
		// A permit ('s') uses neither a fencing counter nor a forced set.
		fence, forced := e.Key, set
		if h, ok := e.Holder.(*hold); ok {
			fence, forced = h.ks.Fence, h.ks.Forced
		}
		keyArgs = append(keyArgs, e.Key, set, fence, forced)
		args[i], args[n+i], args[2*n+i] = e.Field, ttls[i], string(e.Kind)
	}
	res, err := scriptRenew.run(ctx, c, keyArgs, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != n {
		return nil, fmt.Errorf("dlock: renew returned %d results for %d locks", len(res), n)
	}
	return res, nil
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// defaultClientID returns "<host>/<pid>/<16 hex digits>": unique among live
// clients (64 random bits on top of host and process), and telling an
// operator who inspects a lock which host and process holds it (see
// ParseClientID). Redisson uses a random UUID for the same purpose.
func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	host = strings.Map(func(r rune) rune {
		if r <= ' ' || r == ':' || r == '/' || r == 0x7f {
			return '_'
		}
		return r
	}, host)
	if len(host) > 64 {
		host = host[:64]
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
}

// ParseClientID splits a client id made by New's default,
// "<host>/<pid>/<random>", into its host and process id; ok is false for an
// id set with WithClientID in another form (a Redisson UUID, say). An owner
// field "<client id>:<n>" (Holder.Owner) is accepted as well. Safe for
// concurrent use.
func ParseClientID(id string) (host string, pid int, ok bool) {
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		id = id[:i]
	}
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] == "" || len(parts[2]) != 16 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	return parts[0], pid, true
}

// tasks counts work running in the background. Unlike a sync.WaitGroup, work
// may start while Close waits for the count to reach zero (a hold lost
// during Close starts its cleanup then).
type tasks struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n returns to zero
}

func (g *tasks) add() {
	g.mu.Lock()
	if g.n == 0 {
		g.zero = make(chan struct{})
	}
	g.n++
	g.mu.Unlock()
}

func (g *tasks) done() {
	g.mu.Lock()
	g.n--
	if g.n == 0 {
		close(g.zero)
	}
	g.mu.Unlock()
}

// idle returns a channel closed once no work is running.
func (g *tasks) idle() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		return closedCh
	}
	return g.zero
}
