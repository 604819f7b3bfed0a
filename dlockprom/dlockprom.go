// Package dlockprom exports dlock's lock activity as Prometheus metrics.
//
// New builds a *Metrics, registers its collectors on the prometheus.Registerer
// you pass (never on the global default registry), and returns it; hand it to
// dlock.New with dlock.WithObserver. One *Metrics may observe several Clients.
//
//	reg := prometheus.NewRegistry()
//	m, err := dlockprom.New(reg)
//	...
//	c, err := dlock.New(rdb, dlock.WithObserver(m))
//
// # Metrics
//
// Every metric except the renewal, fallback-tier, semaphore-permit and latch
// ones carries the label kind, the lock type: "mutex", "fair", "read", "write", "multi",
// "semaphore" (dlock.Kind). Lock names are never labels: a service may use
// millions of names, and each would be a time series.
//
//	dlock_acquire_attempts_total{kind}    acquisitions that ended (re-entries excluded)
//	dlock_acquired_total{kind}            of those, the grants
//	dlock_wait_timeouts_total{kind}       of those, the ones whose wait ran out
//	dlock_acquire_errors_total{kind}      of those, failures (Redis error, cancelled context, closed client)
//	dlock_wait_duration_seconds{kind}     histogram: time from the call to its outcome, every outcome
//	dlock_hold_duration_seconds{kind}     histogram: time from grant to final release
//	dlock_held{kind}                      gauge: holds currently held through observed Clients
//	dlock_lost_total{kind}                holds that ended without Unlock (lost)
//	dlock_max_hold_exceeded_total{kind}   of those, the ones ended by their MaxHold (dlock.MaxHold, dlock.WithMaxHold)
//	dlock_long_holds_total{kind}          holds renewed past dlock.WithLongHoldAlert's threshold, once each
//	dlock_renewals_total                  locks carried by watchdog renewal calls
//	dlock_renewal_failures_total          of those, locks whose renewal call failed
//
// # Semaphores and latches
//
// A Semaphore's permit is a hold of kind "semaphore": the metrics above
// count Permits (an AcquireN(3) is one acquisition, one in dlock_held).
// Their weight is counted apart:
//
//	dlock_semaphore_permits_held          gauge: permits held (AcquireN's n summed) through observed Clients
//
// It rises by n at a grant and falls by n at the Permit's Release, which
// the handle needs whatever happened: a lost permit counts until its
// Release (dlock_held drops it at the loss, when its weight is not known).
//
// Metrics implements dlock.LatchObserver for count-down latches:
//
//	dlock_latch_countdowns_total          CountDown calls Redis applied
//	dlock_latch_waits_total               Wait calls that returned nil (the latch open)
//	dlock_latch_errors_total{op}          CountDown (op "countdown") and Wait (op "wait") calls that failed
//
// An acquisition is counted when it ends, so attempts = acquired + timeouts +
// errors always holds. A TryLock with wait <= 0 that finds the lock taken
// counts as a wait timeout (its wait of zero ran out). The wait-timeout ratio of the seeds' checklist is
// rate(dlock_wait_timeouts_total) / rate(dlock_acquire_attempts_total) and
// the average wait is rate(..._sum) / rate(..._count) of the wait histogram.
//
// A renewal that fails is retried by the watchdog; a lock is lost only when
// it cannot be confirmed within its TTL, which dlock_lost_total counts.
//
// # The fallback tier
//
// With dlock.WithFallback (Redis first, a SQL named lock behind a circuit
// breaker), dlock_backend_grants_total{backend} counts grants by the tier
// that made them (redis, mysql, postgres), dlock_fallbacks_total{backend,
// reason} the calls that turned to the fallback by the class of Redis
// failure (dlock.FallbackReason), and dlock_breaker_state the breaker (0
// closed, 1 half-open, 2 open).
//
// # What is guaranteed, and what is not
//
// Guaranteed: New registers on the Registerer it is given and nowhere else,
// and registers nothing when it fails. Every label has a fixed, small set of
// values (kind, backend, reason, op): no lock name, owner or token becomes a
// label or a value. attempts = acquired + timeouts + errors per kind, at
// every scrape once the acquisitions under way have ended. The methods never
// call Redis and never block but on the metrics' own updates; a *Metrics is
// safe for concurrent use by any number of Clients.
//
// Not guaranteed: the metrics are this process's view, through the Clients
// that use this *Metrics: they do not show other processes' holds or what
// Redis holds now (dlock inspect and dlock dashboard read Redis). dlock_held
// counts Redis-tier holds only (a fallback grant counts in
// dlock_acquired_total and dlock_backend_grants_total, not in dlock_held),
// and drops a lost hold when its holder learns of the loss (the dlock
// package doc says when). dlock_semaphore_permits_held keeps
// a lost permit until its Release. Re-entries are not counted anywhere.
package dlockprom

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-dev/dlock"
)

// Metrics is a dlock.Observer that keeps Prometheus metrics. It is safe for
// concurrent use by any number of Clients and goroutines; its methods never
// block on anything but the metrics' own atomic updates.
type Metrics struct {
	// NopObserver keeps Metrics a dlock.Observer when methods are added to
	// the interface before this package learns about them.
	dlock.NopObserver

	attempts        *prometheus.CounterVec
	acquired        *prometheus.CounterVec
	waitTimeouts    *prometheus.CounterVec
	acquireErrors   *prometheus.CounterVec
	waitDuration    *prometheus.HistogramVec
	holdDuration    *prometheus.HistogramVec
	held            *prometheus.GaugeVec
	lost            *prometheus.CounterVec
	maxHold         *prometheus.CounterVec
	longHolds       *prometheus.CounterVec
	renewals        prometheus.Counter
	renewalFailures prometheus.Counter
	backendGrants   *prometheus.CounterVec
	fallbacks       *prometheus.CounterVec
	breakerState    prometheus.Gauge
	permitsHeld     prometheus.Gauge
	countdowns      prometheus.Counter
	latchWaits      prometheus.Counter
	latchErrors     *prometheus.CounterVec
}

var (
	_ dlock.Observer         = (*Metrics)(nil)
	_ dlock.LongHoldObserver = (*Metrics)(nil)
	_ dlock.LatchObserver    = (*Metrics)(nil)
)

// Option configures New. Options are plain functions applied in order; they
// are safe to share between goroutines.
type Option func(*config) error

type config struct {
	namespace   string
	constLabels prometheus.Labels
	waitBuckets []float64
	holdBuckets []float64
}

// DefaultWaitBuckets are the wait-duration histogram's buckets, in seconds:
// from an uncontended grant (about a round trip) to DefaultWaitTime and beyond.
// New copies them; do not modify them while New may run.
var DefaultWaitBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// DefaultHoldBuckets are the hold-duration histogram's buckets, in seconds.
// New copies them; do not modify them while New may run.
var DefaultHoldBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 1800}

// WithNamespace prefixes every metric name with ns and an underscore:
// WithNamespace("shop") gives shop_dlock_acquired_total. ns must be a valid
// metric name prefix.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if ns == "" || !validName(ns) {
			return fmt.Errorf("%w: bad namespace %q", dlock.ErrInvalidArgument, ns)
		}
		c.namespace = ns
		return nil
	}
}

// WithConstLabels adds labels with fixed values to every metric, for example
// the service or the Redis deployment. "kind" is reserved.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) error {
		for k := range l {
			if k == "kind" || !validName(k) {
				return fmt.Errorf("%w: bad const label %q", dlock.ErrInvalidArgument, k)
			}
		}
		if c.constLabels == nil {
			c.constLabels = prometheus.Labels{}
		}
		for k, v := range l {
			c.constLabels[k] = v
		}
		return nil
	}
}

// WithWaitBuckets replaces DefaultWaitBuckets (seconds, increasing).
func WithWaitBuckets(b ...float64) Option {
	return func(c *config) error {
		if !increasing(b) {
			return fmt.Errorf("%w: wait buckets must be non-empty and increasing", dlock.ErrInvalidArgument)
		}
		c.waitBuckets = append([]float64(nil), b...)
		return nil
	}
}

// WithHoldBuckets replaces DefaultHoldBuckets (seconds, increasing).
func WithHoldBuckets(b ...float64) Option {
	return func(c *config) error {
		if !increasing(b) {
			return fmt.Errorf("%w: hold buckets must be non-empty and increasing", dlock.ErrInvalidArgument)
		}
		c.holdBuckets = append([]float64(nil), b...)
		return nil
	}
}

func increasing(b []float64) bool {
	if len(b) == 0 {
		return false
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			return false
		}
	}
	return true
}

func validName(s string) bool {
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// New creates the metrics and registers them on reg, which must not be nil.
// It fails (registering nothing) when an option is invalid or when reg
// already has metrics of the same names, e.g. from a second New on the same
// Registerer: use WithNamespace or WithConstLabels to tell them apart, or
// share one *Metrics. New is safe for concurrent use.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: nil Registerer", dlock.ErrInvalidArgument)
	}
	cfg := config{waitBuckets: DefaultWaitBuckets, holdBuckets: DefaultHoldBuckets}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", dlock.ErrInvalidArgument, i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	name := func(n string) string {
		if cfg.namespace != "" {
			return cfg.namespace + "_dlock_" + n
		}
		return "dlock_" + n
	}
	kind := []string{"kind"}
	counter := func(n, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name(n), Help: help, ConstLabels: cfg.constLabels}, kind)
	}
	m := &Metrics{
		attempts:      counter("acquire_attempts_total", "Lock acquisitions that ended, by lock kind (re-entries excluded)."),
		acquired:      counter("acquired_total", "Lock acquisitions that were granted, by lock kind."),
		waitTimeouts:  counter("wait_timeouts_total", "Lock acquisitions whose wait time ran out, by lock kind."),
		acquireErrors: counter("acquire_errors_total", "Lock acquisitions that failed with an error (Redis, cancelled context, closed client), by lock kind."),
		waitDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name("wait_duration_seconds"), Help: "Time from a lock acquisition call to its outcome, by lock kind.",
			Buckets: cfg.waitBuckets, ConstLabels: cfg.constLabels,
		}, kind),
		holdDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name("hold_duration_seconds"), Help: "Time from a lock's grant to its final release, by lock kind.",
			Buckets: cfg.holdBuckets, ConstLabels: cfg.constLabels,
		}, kind),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: name("held"), Help: "Locks currently held through the observed clients, by lock kind.", ConstLabels: cfg.constLabels,
		}, kind),
		lost:      counter("lost_total", "Holds that ended without Unlock: renewal found another owner or could not confirm the hold in time, or a lease expired."),
		maxHold:   counter("max_hold_exceeded_total", "Holds ended by their MaxHold (dlock.MaxHold, dlock.WithMaxHold): alive but held too long; a subset of lost_total."),
		longHolds: counter("long_holds_total", "Holds renewed past the Client's dlock.WithLongHoldAlert threshold (counted once each): holders that may be stuck."),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("renewals_total"), Help: "Locks carried by watchdog renewal calls.", ConstLabels: cfg.constLabels,
		}),
		renewalFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("renewal_failures_total"), Help: "Locks carried by watchdog renewal calls that failed (and are retried).", ConstLabels: cfg.constLabels,
		}),
	}
	m.backendGrants = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: name("backend_grants_total"), Help: "Grants by the tier that granted them: redis, or the fallback's (mysql, postgres).", ConstLabels: cfg.constLabels,
	}, []string{"backend"})
	m.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: name("fallbacks_total"), Help: "WithLock calls that turned to the fallback tier, by tier and by the class of Redis failure (dlock.FallbackReason).", ConstLabels: cfg.constLabels,
	}, []string{"backend", "reason"})
	m.breakerState = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: name("breaker_state"), Help: "The fallback circuit breaker: 0 closed (Redis in use), 1 half-open (probing), 2 open (fallback).", ConstLabels: cfg.constLabels,
	})
	m.beyond(name, cfg.constLabels)
	cs := []prometheus.Collector{m.attempts, m.acquired, m.waitTimeouts, m.acquireErrors,
		m.waitDuration, m.holdDuration, m.held, m.lost, m.maxHold, m.longHolds, m.renewals, m.renewalFailures,
		m.backendGrants, m.fallbacks, m.breakerState, m.permitsHeld, m.countdowns, m.latchWaits, m.latchErrors}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("dlockprom: %w", err)
		}
	}
	return m, nil
}

// beyond makes the metrics of semaphore permits and latches.
func (m *Metrics) beyond(name func(string) string, labels prometheus.Labels) {
	m.permitsHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: name("semaphore_permits_held"), Help: "Semaphore permits held through the observed clients, each Permit counting its AcquireN n; a lost permit counts until its Release.", ConstLabels: labels,
	})
	m.countdowns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: name("latch_countdowns_total"), Help: "Count-down latch CountDown calls that Redis applied.", ConstLabels: labels,
	})
	m.latchWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: name("latch_waits_total"), Help: "Count-down latch Wait calls that returned with the latch open.", ConstLabels: labels,
	})
	m.latchErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: name("latch_errors_total"), Help: "Count-down latch calls that failed (Redis error, cancelled context, closed client), by op: countdown or wait.", ConstLabels: labels,
	}, []string{"op"})
}

// AcquireStarted implements dlock.Observer; safe for concurrent use. The acquisition is counted when
// it ends; a re-entry of a lock the handle already holds is not counted.
func (m *Metrics) AcquireStarted(_ context.Context, _ dlock.Kind, _ string) func(dlock.Acquisition) {
	return m.acquisition
}

func (m *Metrics) acquisition(a dlock.Acquisition) {
	if a.Reentry {
		return
	}
	k := string(a.Kind)
	m.attempts.WithLabelValues(k).Inc()
	m.waitDuration.WithLabelValues(k).Observe(a.Waited.Seconds())
	switch {
	case a.Acquired:
		m.acquired.WithLabelValues(k).Inc()
		if a.Backend == "" || a.Backend == dlock.BackendRedis {
			m.held.WithLabelValues(k).Inc() // fallback holds report no release
		}
		if a.Kind == dlock.KindSemaphore {
			m.permitsHeld.Add(float64(max(a.Weight, 1)))
		}
		backend := a.Backend
		if backend == "" {
			backend = dlock.BackendRedis
		}
		m.backendGrants.WithLabelValues(backend).Inc()
	case a.Err != nil:
		m.acquireErrors.WithLabelValues(k).Inc()
	case a.TimedOut:
		m.waitTimeouts.WithLabelValues(k).Inc()
	default:
		// wait <= 0 and the lock was taken: a single attempt that failed is
		// a wait that ran out at once.
		m.waitTimeouts.WithLabelValues(k).Inc()
	}
}

// ReleaseStarted implements dlock.Observer; safe for concurrent use. A final release ends a hold: it
// lowers dlock_held (unless the hold had been lost, which Lost counted) and
// observes the hold duration.
func (m *Metrics) ReleaseStarted(_ context.Context, _ dlock.Kind, _ string) func(dlock.Release) {
	return m.release
}

func (m *Metrics) release(r dlock.Release) {
	if !r.Final {
		// An Unlock refused because the client is closing (ErrClosed) is
		// not final: it leaves the hold to Close, whose own final release
		// is reported.
		return
	}
	if r.Kind == dlock.KindSemaphore {
		m.permitsHeld.Sub(float64(max(r.Weight, 1)))
	}
	if errors.Is(r.Err, dlock.ErrClosed) {
		// Close's release of a hold it ended: Lost counted it.
		return
	}
	k := string(r.Kind)
	if r.Held > 0 {
		m.holdDuration.WithLabelValues(k).Observe(r.Held.Seconds())
	}
	if !errors.Is(r.Err, dlock.ErrLockLost) {
		m.held.WithLabelValues(k).Dec()
	}
}

// Lost implements dlock.Observer: it counts the loss and lowers dlock_held.
// Safe for concurrent use.
func (m *Metrics) Lost(kind dlock.Kind, _ string, err error) {
	k := string(kind)
	m.lost.WithLabelValues(k).Inc()
	if errors.Is(err, dlock.ErrMaxHold) {
		m.maxHold.WithLabelValues(k).Inc()
	}
	m.held.WithLabelValues(k).Dec()
}

// HeldLong implements dlock.LongHoldObserver: it counts a hold renewed past
// the Client's long-hold threshold. Safe for concurrent use.
func (m *Metrics) HeldLong(kind dlock.Kind, _ string, _ time.Duration) {
	m.longHolds.WithLabelValues(string(kind)).Inc()
}

// CountedDown implements dlock.LatchObserver: it counts a CountDown, or
// its failure. Safe for concurrent use.
func (m *Metrics) CountedDown(_ string, err error) {
	if err != nil {
		m.latchErrors.WithLabelValues("countdown").Inc()
		return
	}
	m.countdowns.Inc()
}

// LatchWaited implements dlock.LatchObserver: it counts a Wait that
// returned, with the latch open or failed. Safe for concurrent use.
func (m *Metrics) LatchWaited(_ string, _ time.Duration, err error) {
	if err != nil {
		m.latchErrors.WithLabelValues("wait").Inc()
		return
	}
	m.latchWaits.Inc()
}

// Renewed implements dlock.Observer: n locks renewed, all n counted as
// failures when err is not nil. Safe for concurrent use.
func (m *Metrics) Renewed(n int, err error) {
	m.renewals.Add(float64(n))
	if err != nil {
		m.renewalFailures.Add(float64(n))
	}
}

// FellBack implements dlock.Observer; safe for concurrent use.
func (m *Metrics) FellBack(_ dlock.Kind, _ string, backend string, reason error) {
	m.fallbacks.WithLabelValues(backend, dlock.FallbackReason(reason)).Inc()
}

// BreakerChanged implements dlock.Observer; safe for concurrent use.
func (m *Metrics) BreakerChanged(state string) {
	switch state {
	case "closed":
		m.breakerState.Set(0)
	case "half-open":
		m.breakerState.Set(1)
	case "open":
		m.breakerState.Set(2)
	}
}
