// Package lease is dlock's engine. A lease is one granted hold of a lock or
// permit of a semaphore: its grant, its renewal through the batched
// watchdog, its loss with a typed cause, its release, and the one wait loop
// with the direct hand-off that leads to it. Every kind (mutex, fair lock,
// read and write sides, semaphore, election) runs on it through a Protocol,
// which says what its scripts are and how their replies read.
//
// The engine knows no Lua and no key layout: the kinds supply both. It
// sends every call through the wire package, which owns batching and "ctx is
// law".
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

// Config is what an Engine is built with; the public options fill it in.
type Config struct {
	ClientID       string
	Watchdog       time.Duration // the TTL of a renewed hold, renewed every third of it
	Recheck        time.Duration // a waiter's re-check interval
	Claim          time.Duration // the hand-off claim window
	Linger         time.Duration // how long an idle lock channel stays subscribed
	FenceTTL       time.Duration
	CloseTimeout   time.Duration // bounds Close
	CleanupTimeout time.Duration // bounds each detached cleanup
	SharedConnOnly bool          // every call through the given client (no lone connection)
	Replicas       int           // > 0: confirm each grant on that many replicas
	ReplicaTimeout time.Duration
	MaxHold        time.Duration // > 0: the default bound of a hold
	LongHold       time.Duration // > 0: a renewed hold this old is reported once
	SpinMin        time.Duration // > 0: spin mode
	SpinMax        time.Duration
	Logger         *slog.Logger
	Observers      []Observer
	// Renew renews one batch of entries (the kinds' renewal script).
	Renew func(ctx context.Context, w *wire.Wire, batch []*renew.Entry, ttls []int64) ([]int64, error)
	// Sharded, when set, makes every message sharded (SPUBLISH, SSUBSCRIBE
	// through this Cluster client): see the notify package.
	Sharded *redis.ClusterClient
	// Report makes the engine run the doctor's checks once, at its first
	// acquisition, and warn of each check that failed on ReportLogger.
	Report bool
	// ReportLogger is where Report's warnings go; nil: slog.Default() as it
	// is at the time of the report, so that they reach the user even when
	// Logger discards.
	ReportLogger *slog.Logger
	// Space is the namespace every key and channel begins with.
	Space keys.Space
	// Touch proves a hold (key, owner's field) is on the node it runs on,
	// with a write for WAIT to count (kind.Touch).
	Touch *wire.Script
	// Read runs one HEXISTS or GET as a script, which the primary answers
	// (kind.PrimaryRead): for a Wire that sends bare reads to replicas.
	Read *wire.Script
	// RenewFailed and RenewBatched, when set, are told of each watchdog
	// call besides the observers (the fallback tier's breaker listens).
	RenewFailed  func(n int, err error)
	RenewBatched func(n int)
}

// Args are script arguments that never change for an Engine, boxed once.
type Args struct {
	WatchdogMs, QueueTTLMs, FenceTTLMs, ClaimMs any
	WriterWaitMs                                any // how long a waiting writer holds readers back unless it re-checks
}

// Engine is one Client's engine: its wire, pub/sub hub, watchdog and
// deadlines, and the registry of its live leases. Safe for concurrent use.
type Engine struct {
	Cfg  Config
	Args Args
	rdb  redis.UniversalClient
	Wire *wire.Wire

	hub       *notify.Hub
	renewer   *renew.Renewer
	deadlines *deadlines
	owners    atomic.Uint64 // numbers owner fields: one per lease, never reused
	closed    atomic.Bool
	pops      chan struct{} // a slot per waiter that pops its hand-off (pop.go)
	popOff    atomic.Bool   // Redis refused a pop: waiters are woken by messages

	mu      sync.Mutex
	leases  map[*Lease]struct{} // every live lease, for Close
	byKey   map[string]*Lease   // the same, by key (a list through Lease.sameKey), for ForceUnlock's news
	closers map[Closer]struct{} // other things Close ends (Observe)
	// forcedLog is ForceUnlock's recent news, for the grants not yet
	// tracked when it came (forced.go); forcedN counts it, read without mu.
	forcedLog forcedLog
	forcedN   atomic.Uint64

	reported sync.Once // the first-contact report (firstContact)
}

// Closer is something besides a lease that Close ends: CloseWith runs on a
// goroutine of its own, bounded by ctx.
type Closer interface {
	CloseWith(ctx context.Context) error
}

// New returns an Engine over rdb. It makes no network call.
func New(rdb redis.UniversalClient, cfg Config) *Engine {
	e := &Engine{
		Cfg:     cfg,
		rdb:     rdb,
		Wire:    wire.New(rdb, cfg.CleanupTimeout, !cfg.SharedConnOnly),
		leases:  make(map[*Lease]struct{}),
		byKey:   make(map[string]*Lease),
		closers: make(map[Closer]struct{}),
		pops:    make(chan struct{}, popSlots(rdb)),
		Args: Args{
			WatchdogMs:   ms(cfg.Watchdog),
			QueueTTLMs:   ms(4 * cfg.Recheck),
			FenceTTLMs:   ms(cfg.FenceTTL),
			ClaimMs:      ms(cfg.Claim),
			WriterWaitMs: ms(cfg.Recheck + cfg.Claim),
		},
	}
	e.deadlines = newDeadlines((*Lease).checkDeadline)
	e.hub = notify.New(rdb, notify.Config{
		ClientChannel: cfg.Space.ClientChannel(cfg.ClientID),
		Linger:        cfg.Linger,
		ReadyTimeout:  cfg.Recheck,
		CloseWait:     cfg.CloseTimeout,
		Forced:        e.forced,
		Heard:         e.heard,
		Log:           cfg.Logger,
		Sharded:       cfg.Sharded,
		ClientID:      cfg.ClientID,
		Space:         cfg.Space,
	})
	e.Wire.SetVariant(wire.Variant{Namespace: cfg.Space.Prefix(), Sharded: cfg.Sharded != nil})
	var slot func(string) uint16
	if _, ok := rdb.(*redis.ClusterClient); ok {
		slot = keys.Slot
	}
	e.renewer = renew.New(renew.Config{
		Period: cfg.Watchdog / renew.PerTTL,
		Run: func(ctx context.Context, batch []*renew.Entry, ttls []int64) ([]int64, error) {
			return cfg.Renew(ctx, e.Wire, batch, ttls)
		},
		Slot:    slot,
		Failed:  e.renewFailed,
		Batched: e.renewBatched,
	})
	return e
}

func (e *Engine) renewFailed(n int, err error) {
	e.Cfg.Logger.Warn("dlock: renewal failed; will retry", "locks", n, "err", err)
	if e.Cfg.RenewFailed != nil {
		e.Cfg.RenewFailed(n, err)
	}
	for _, o := range e.Cfg.Observers {
		o.Renewed(n, err)
	}
}

func (e *Engine) renewBatched(n int) {
	if e.Cfg.RenewBatched != nil {
		e.Cfg.RenewBatched(n)
	}
	for _, o := range e.Cfg.Observers {
		o.Renewed(n, nil)
	}
}

// heldLong reports a hold renewed past Config.LongHold.
func (e *Engine) heldLong(kind Kind, name string, held time.Duration) {
	e.Cfg.Logger.Warn("dlock: lock held long", "name", name, "kind", kind, "held", held)
	for _, o := range e.Cfg.Observers {
		if lo, ok := o.(LongHoldObserver); ok {
			lo.HeldLong(kind, name, held)
		}
	}
}

// Redis returns the go-redis client the engine uses.
func (e *Engine) Redis() redis.UniversalClient { return e.rdb }

// Hub returns the engine's pub/sub hub, for kinds that wait on their own
// (a latch's waiters).
func (e *Engine) Hub() *notify.Hub { return e.hub }

// Closed reports whether Close has begun.
func (e *Engine) Closed() bool { return e.closed.Load() }

// Renewals is how many leases the watchdog renews (for tests).
func (e *Engine) Renewals() int { return e.renewer.Len() }

// RenewalsQuiet reports whether the watchdog has nothing due and nothing in
// flight (for tests).
func (e *Engine) RenewalsQuiet() bool { return e.renewer.Quiet() }

// newOwner returns a new owner id, "<client id>:<n>", never reused.
func (e *Engine) newOwner() string {
	return e.Cfg.ClientID + ":" + strconv.FormatUint(e.owners.Add(1), 10)
}

// Detach runs f in the background, bounded by the cleanup timeout and
// counted for Close (see wire.Wire.Detach).
func (e *Engine) Detach(f func(ctx context.Context)) { e.Wire.Detach(f) }

// Close stops the watchdog, wakes every waiter with ErrClosed, tells every
// holder that its lease ended (ErrClosed), releases the leases, ends the
// closers, closes the pub/sub connection and waits for background work,
// all within the close timeout whatever Redis does.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	deadline := time.Now().Add(e.Cfg.CloseTimeout)
	e.renewer.Stop()
	e.mu.Lock()
	leases := make([]*Lease, 0, len(e.leases))
	for l := range e.leases {
		leases = append(leases, l)
	}
	closers := make([]Closer, 0, len(e.closers))
	for o := range e.closers {
		closers = append(closers, o)
	}
	e.mu.Unlock()
	// Holders learn first that their leases end, then the leases are
	// released for others, each release detached and all within the budget.
	released := make(chan error, len(leases)+len(closers))
	for _, l := range leases {
		l.lose(lossError(l.name, ErrClosed, nil))
		e.Detach(func(ctx context.Context) { released <- l.releaseAll(ctx) })
	}
	for _, o := range closers {
		e.Detach(func(ctx context.Context) { released <- o.CloseWith(ctx) })
	}
	budget, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Last, whatever happens: the wire's workers end once their queue is
	// empty; later calls go out on goroutines of their own.
	defer e.Wire.Stop()
	defer e.deadlines.stop()
	var errs []error
	for range len(leases) + len(closers) {
		select {
		case err := <-released:
			if err != nil {
				errs = append(errs, err)
			}
		case <-budget.Done():
			errs = append(errs, fmt.Errorf("dlock: close timeout: some locks were left to expire by their TTL"))
			_ = e.hub.CloseWithin(0) // the budget is spent: it closes in the background
			return errors.Join(errs...)
		}
	}
	if err := e.hub.CloseWithin(time.Until(deadline)); err != nil && !errors.Is(err, redis.ErrClosed) {
		errs = append(errs, err)
	}
	for _, ch := range []<-chan struct{}{e.Wire.Idle(), e.Wire.Drain()} {
		select {
		case <-ch:
		case <-budget.Done():
		}
	}
	return errors.Join(errs...)
}

// track registers a live lease for Close and for ForceUnlock's news; it
// refuses (ok false) once Close has begun, so that no lease escapes Close.
// unheard reports that news of a force about the lease's key came since
// the lease was made, while nobody was there to ask Redis (forced.go).
func (e *Engine) track(l *Lease) (ok, unheard bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return false, false
	}
	e.leases[l] = struct{}{}
	key := l.p.Key()
	l.sameKey = e.byKey[key]
	e.byKey[key] = l
	// News of a force that came since the lease's request was sent found
	// nobody to ask Redis: the lease asks now (forced.go).
	return true, e.forcedLog.since(key, l.forcedSeen)
}

func (e *Engine) untrack(l *Lease) {
	e.mu.Lock()
	if _, ok := e.leases[l]; !ok {
		e.mu.Unlock()
		return
	}
	delete(e.leases, l)
	key := l.p.Key()
	switch head := e.byKey[key]; {
	case head == l && l.sameKey == nil:
		delete(e.byKey, key)
	case head == l:
		e.byKey[key] = l.sameKey
	default:
		for p := head; p != nil; p = p.sameKey {
			if p.sameKey == l {
				p.sameKey = l.sameKey
				break
			}
		}
	}
	l.sameKey = nil
	e.mu.Unlock()
}

// TrackCloser registers o for Close; it refuses (false) once Close has
// begun.
func (e *Engine) TrackCloser(o Closer) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return false
	}
	e.closers[o] = struct{}{}
	return true
}

// UntrackCloser forgets o.
func (e *Engine) UntrackCloser(o Closer) {
	e.mu.Lock()
	delete(e.closers, o)
	e.mu.Unlock()
}

// WrapClosed turns the hub's "closed" into ErrClosed.
func (e *Engine) WrapClosed(err error) error {
	if errors.Is(err, notify.ErrClosed) {
		return ErrClosed
	}
	return err
}

// Ms converts d to whole milliseconds, at least 1, as scripts take TTLs.
func Ms(d time.Duration) int64 { return ms(d) }

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// TTLArg is ttl as a script argument, boxed once when it is the watchdog's.
func (e *Engine) TTLArg(ttl time.Duration) any {
	if ttl == e.Cfg.Watchdog {
		return e.Args.WatchdogMs
	}
	return ms(ttl)
}
