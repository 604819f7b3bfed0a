// Package renew is dlock's watchdog: one goroutine per Client that keeps every
// held lock's TTL fresh with as few Redis calls as possible.
//
// Entries fall due every period (a third of the watchdog timeout). When the
// earliest entry falls due, every entry due within the next half period is
// renewed with it, so locks taken at different moments soon share a beat and
// ten thousand held locks cost a handful of script calls per period. A call
// carries at most MaxBatch locks, all in one Cluster slot.
package renew

import (
	"context"
	"sync"
	"time"
)

// PerTTL is how many renewals a hold gets per TTL: the watchdog renews
// every TTL/PerTTL, so that a failed renewal is retried well within it.
const PerTTL = 3

// MaxBatch is the most locks renewed by one script call.
const MaxBatch = 500

// Func renews the entries of one batch in one call, giving each the TTL in
// ttls (milliseconds). It returns, per entry, Held when the owner still held
// the lock, or another code saying why not (Func's own convention, passed on
// to Holder.Lost).
type Func func(ctx context.Context, batch []*Entry, ttls []int64) ([]int64, error)

// Held is the code Func returns for a lock its owner still holds.
const Held = 1

// Holder is told the outcome of its entry's renewals. Its methods run on the
// goroutine of the call that carried the entry: one at a time for an entry,
// at once for entries of different batches. They must not block or call
// back into the Renewer except through Remove.
type Holder interface {
	// Renewed is called with the time the successful call was sent: the
	// lock is certainly held until sent plus the TTL.
	Renewed(sent time.Time)
	// Lost is called once when Redis answered that the owner no longer
	// holds the lock, with Func's code for why; the entry is then removed.
	Lost(code int64)
	// Failed is called when the call carrying the entry failed; the entry
	// is retried soon.
	Failed(err error)
}

// Entry is one held lock under renewal. Its exported fields are set before
// Add and not changed afterwards.
type Entry struct {
	Key    string // the lock key
	Field  string // the owner's field in the lock hash
	Kind   byte   // what the renewal does, for Func (renew.lua's kinds in dlock)
	Set    string // a second key of the same slot Func may need ("" if none)
	Fence  string // the lock's fencing counter ("" if none)
	Forced string // the lock's record of forced-out owners ("" if none)
	// Token is the hold's fencing token (0: none, a permit's): a renewal
	// that finds the hold gone compares it with the fencing sequence, to
	// tell Redis losing the lock from another owner taking it.
	Token  uint64
	Since  int64         // when the hold was granted, ms since the epoch; 0: write no record of a long hold
	TTL    time.Duration // the TTL each renewal gives the lock
	Holder Holder
	// Renewals counts the entry's renewals so far, those Hurry asked for
	// aside: the Renewer writes it after each call, and Func may read it
	// during one.
	Renewals int
	// Hurried says that the entry's next call (or the one in flight) was
	// asked for by Hurry rather than due: it confirms the hold, and says
	// nothing of its age (a hold granted a moment ago is no long hold). The
	// Renewer writes it between calls, and Func may read it during one.
	Hurried bool

	due      time.Time
	again    bool // Hurry came while a call carried the entry: renew it again at once
	removed  bool
	inflight chan struct{} // closed when the call carrying this entry returns
}

// Config is what a Renewer is built with.
type Config struct {
	Period time.Duration           // how often each entry is renewed
	Run    Func                    // renews one batch
	Slot   func(key string) uint16 // groups keys by Cluster slot; nil: one group
	// Failed, when set, is called after a call that returned an error.
	// Calls run at once, so Failed and Batched must be safe for concurrent
	// use.
	Failed func(n int, err error)
	// Batched, when set, is called after each successful call with its size.
	Batched func(n int)
}

// Renewer batches renewals. Its methods are safe for concurrent use.
//
// Its loop sleeps on one timer, armed for the earliest due time of an entry
// not being renewed by whoever changes that time (Add, the loop, or a call
// that returns) and disarmed when no such entry is left: the loop wakes only
// to renew, never to learn of an Add or a Remove. A lock taken and released
// within a period (the common case when each request takes one) thus costs
// the timer's Reset and Stop, and no wake-up of the loop's goroutine.
//
// Each batch's call runs on a goroutine of its own, so that a node of a
// Cluster that does not answer holds back only its own batches: the others
// are renewed on time (each call waits at most a period).
type Renewer struct {
	cfg Config

	mu      sync.Mutex
	entries map[*Entry]struct{}
	timer   *time.Timer // the loop's alarm, armed for wakeAt
	// wakeAt is when timer fires; zero: it is disarmed (no entry waits for
	// its due time). Guarded by mu.
	wakeAt  time.Time
	stop    chan struct{}
	done    chan struct{}
	base    context.Context // cancelled by Stop: a call in flight ends at once
	cancel  context.CancelFunc
	stopped bool
	// hurried is when the last Hurry takes (or took) effect; guarded by mu.
	hurried time.Time
	calls   sync.WaitGroup // the calls in flight
	wakes   int            // times the loop woke from its wait; guarded by mu (tests)
}

// New starts a Renewer.
func New(cfg Config) *Renewer {
	r := &Renewer{
		cfg:     cfg,
		entries: make(map[*Entry]struct{}),
		timer:   time.NewTimer(time.Hour),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	r.timer.Stop()
	r.base, r.cancel = context.WithCancel(context.Background())
	go r.loop()
	return r
}

// Add schedules e to be renewed at due (at once if due has passed).
func (r *Renewer) Add(e *Entry, due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.due = due
	e.removed = false
	r.entries[e] = struct{}{}
	// Most entries fall due after the one the timer is armed for; only an
	// earlier one moves it.
	if r.wakeAt.IsZero() || due.Before(r.wakeAt) {
		r.arm(due)
	}
}

// Remove stops renewing e. When it returns, no call carrying e is in flight
// and none will start, so a following release cannot race a renewal.
func (r *Renewer) Remove(e *Entry) {
	r.mu.Lock()
	r.drop(e)
	wait := e.inflight
	r.mu.Unlock()
	if wait != nil {
		<-wait
	}
}

// Cancel stops renewing e without waiting for a call in flight; the result
// of such a call is ignored for e.
func (r *Renewer) Cancel(e *Entry) {
	r.mu.Lock()
	r.drop(e)
	r.mu.Unlock()
}

// drop removes e, and disarms the timer when no entry is left: the loop
// has nothing to wake for. Called with mu held.
func (r *Renewer) drop(e *Entry) {
	e.removed = true
	delete(r.entries, e)
	if len(r.entries) == 0 {
		r.disarm()
	}
}

// arm sets the loop's timer to fire at t. Called with mu held.
func (r *Renewer) arm(t time.Time) {
	r.wakeAt = t
	r.timer.Reset(max(time.Until(t), 0))
}

// disarm stops the loop's timer: once it returns, the loop does not wake
// for an earlier arming (timers of Go 1.23 and later). Called with mu held.
func (r *Renewer) disarm() {
	r.wakeAt = time.Time{}
	r.timer.Stop()
}

// Quiet reports whether no entry is due now and no call is in flight
// (tests: a count of commands starts after the renewals it must not see).
func (r *Renewer) Quiet() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for e := range r.entries {
		if e.inflight != nil || !e.due.After(now) {
			return false
		}
	}
	return true
}

// Len returns the number of entries under renewal.
func (r *Renewer) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}

// Stop ends the loop; entries are dropped. Calls in flight have their
// context cancelled and return on their own goroutines: Stop waits for the
// loop only. Idempotent.
func (r *Renewer) Stop() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	close(r.stop)
	r.mu.Unlock()
	r.cancel()
	<-r.done
}

func (r *Renewer) loop() {
	defer close(r.done)
	defer r.timer.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.timer.C:
		}
		r.mu.Lock()
		r.wakes++
		r.mu.Unlock()
		for _, b := range r.collect(time.Now()) {
			r.calls.Add(1)
			go func() {
				defer r.calls.Done()
				r.call(b)
			}()
		}
	}
}

// collect takes the entries due within half a period of now that are not
// being renewed already, grouped by slot in batches of at most MaxBatch,
// and arms the timer for the earliest entry left (disarms it when there is
// none: a call that returns arms it for its entries).
func (r *Renewer) collect(now time.Time) [][]*Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	horizon := now.Add(r.cfg.Period / 2)
	groups := make(map[uint16][]*Entry)
	var order []uint16
	var next time.Time
	for e := range r.entries {
		if e.inflight != nil {
			continue
		}
		if e.due.After(horizon) {
			if next.IsZero() || e.due.Before(next) {
				next = e.due
			}
			continue
		}
		var s uint16
		if r.cfg.Slot != nil {
			s = r.cfg.Slot(e.Key)
		}
		if groups[s] == nil {
			order = append(order, s)
		}
		groups[s] = append(groups[s], e)
	}
	if next.IsZero() {
		r.disarm()
	} else {
		r.arm(next)
	}
	var out [][]*Entry
	for _, s := range order {
		g := groups[s]
		for len(g) > 0 {
			n := min(len(g), MaxBatch)
			b := g[:n:n]
			g = g[n:]
			done := make(chan struct{})
			for _, e := range b {
				e.inflight = done
			}
			out = append(out, b)
		}
	}
	return out
}

// call renews batch b, on a goroutine of its own.
func (r *Renewer) call(b []*Entry) {
	ttls := make([]int64, len(b))
	sent := time.Now()
	for i, e := range b {
		ttls[i] = max(e.TTL.Milliseconds(), 1)
	}
	ctx, cancel := context.WithTimeout(r.base, r.cfg.Period)
	codes, err := r.cfg.Run(ctx, b, ttls)
	cancel()
	renewed, failed, lost := r.sort(b, codes, err, sent)
	// The entries stay out of collect's reach until their holders have
	// been told: a holder hears of one call at a time.
	defer r.settle(b)
	if err != nil {
		for _, e := range failed {
			e.Holder.Failed(err)
		}
		if r.cfg.Failed != nil {
			r.cfg.Failed(len(b), err)
		}
		return
	}
	if r.cfg.Batched != nil {
		r.cfg.Batched(len(b))
	}
	for _, e := range renewed {
		e.Holder.Renewed(sent)
	}
	for _, i := range lost {
		b[i].Holder.Lost(codes[i])
	}
}

// sort reschedules the entries of a call that returned, tells which were
// renewed, which failed and which were lost (indexes into b), and lets a
// Remove waiting for the call return.
func (r *Renewer) sort(b []*Entry, codes []int64, err error, sent time.Time) (renewed, failed []*Entry, lost []int) {
	r.mu.Lock()
	done := b[0].inflight
	for i, e := range b {
		hurried := e.Hurried
		e.Hurried = false
		if e.removed {
			// Removed while the call was in flight (a release waits for it):
			// a renewal that found the lock held still vouches for it.
			if err == nil && codes[i] == Held {
				renewed = append(renewed, e)
			}
			continue
		}
		switch {
		case err != nil:
			// Transient trouble: try again soon. The holder declares the
			// lock lost by itself when its local deadline passes.
			e.due = time.Now().Add(min(r.cfg.Period/4, time.Second))
			failed = append(failed, e)
		case codes[i] == Held:
			if !hurried {
				e.Renewals++
			}
			renewed = append(renewed, e)
			e.due = sent.Add(r.cfg.Period)
		default:
			e.removed = true
			delete(r.entries, e)
			lost = append(lost, i)
		}
	}
	r.mu.Unlock()
	close(done)
	return renewed, failed, lost
}

// settle gives the entries of a call whose holders have been told back to
// collect, arming the timer for them.
func (r *Renewer) settle(b []*Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range b {
		e.inflight = nil
		if e.again {
			e.again = false
			if !e.removed {
				// Hurried while the call was in flight or its holders were
				// told: its reply may predate the Hurry, so again once the
				// Hurry is due.
				e.due, e.Hurried = time.Now(), true
				if r.hurried.After(e.due) {
					e.due = r.hurried
				}
			}
		}
		if !e.removed && !r.stopped && (r.wakeAt.IsZero() || e.due.Before(r.wakeAt)) {
			r.arm(e.due)
		}
	}
}
