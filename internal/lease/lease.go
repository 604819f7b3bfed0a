package lease

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

// Lease is one continuous possession by one owner, from the grant to the
// final release or the loss: a hold of a lock (re-entries share it and
// count up) or a permit of a semaphore. Its owner id is new for every lease
// and never reused, so a script that finds the owner's field knows it is
// this lease's; a lease passed a hold in memory (pass.go) takes its
// predecessor's field with it, and the one Redis hold goes on from one lease
// to the next, never two at once. A Lease is safe for concurrent use.
type Lease struct {
	e    *Engine
	p    Protocol
	name string

	owner  string // "<client id>:<n>"
	field  string // the owner's field in Redis (Protocol.Fields)
	extra  string // the kind's extra argument (Protocol.Fields)
	weight int    // the units the lease takes (Request.Weight), at least 1
	// The three above as script arguments: pointers, boxed without
	// allocating (go-redis writes a *string as the string).
	ownerArg, fieldArg, extraArg any
	// sameKey is the next live lease of the same key in Engine.byKey's
	// list (guarded by Engine.mu): a list through the leases themselves
	// costs tracking no allocation.
	sameKey *Lease

	handle *Handle         // whose gate and state the lease occupies
	outer  *Lease          // the lease it was taken under (a downgrading writer's)
	parent context.Context // the context the lease was asked for with

	token uint64
	// spare are the fencing tokens, first to last, the lease may hand out
	// by passing its hold on in memory (pass.go); none when first > last.
	spare [2]uint64
	start time.Time
	lease time.Duration // > 0: a fixed lease, never renewed past until
	until time.Time     // the fixed lease's end
	// maxHold > 0 ends the lease at maxUntil (MaxHold, WithMaxHold).
	maxHold  time.Duration
	maxUntil time.Time
	// innerMax[i] is the end a re-entry's own MaxHold set for count i+2
	// (zero: it asked for none). It bounds the one hold while the count is
	// at least i+2, that is until that re-entry's Unlock: a nested WithLock
	// that asks for a bound gets it, and the outer holder keeps its own once
	// the inner one has returned. Guarded by mu.
	innerMax []time.Time

	renewal  renew.Entry
	renewing bool // renewal is registered with the watchdog
	alerted  bool // reported as a long hold (Config.LongHold)

	// argBuf holds a kind's script arguments (Buf): EVALSHA's three, and up
	// to 15 keys and arguments (a pass's).
	argBuf [18]any

	// serial admits one re-entry or release call at a time: each sends the
	// count it expects, which must not be read twice.
	serial gate
	// q is the queueing of the attempt in flight, for its Undo.
	q Queueing
	// rel is the release in flight, for its Undo (releaseUndo).
	rel release
	// rechecks is forced.go's recheck state: idle, one in flight, or one
	// in flight and another asked for since it was sent.
	rechecks atomic.Int32

	// The local deadline's place in the Engine's deadlines (guarded by
	// their lock).
	dueAt    time.Time
	dueIndex int

	mu         sync.Mutex
	count      int
	done       chan struct{} // made when asked for (Done), closed when the lease ends
	ended      bool          // released or lost
	finished   bool          // the final release ran; the handle is free again
	err        error         // the loss (a *LossError); nil when released
	validUntil time.Time     // the lease is certain until then (monotonic clock)
	// certainAtRelease: the final release was sent before validUntil.
	certainAtRelease bool
	renewErr         error // the last renewal failure, for the loss reason
	// passing is the waiter a pass in flight goes to: the handle's gate is
	// its, not the queue's, when the lease finishes (passOn).
	passing *gateWaiter
	// handed: a pass in memory already gave the gate, with the hold, to
	// the next holder (pass.go); the lease's end must not give it again.
	handed bool
	// inherited is the check of the pass in memory that gave the lease its
	// hold, until a release of the lease has seen it answered (pass.go).
	inherited atomic.Pointer[passCheck]
	// forcedSeen is how many "forced" messages the engine had heard when
	// the lease was made (forced.go).
	forcedSeen uint64
	onEnd      []*endFn
	// contexts counts the contexts of the hold handed out (Context): a
	// holder with none can only unlock with a context that carries no
	// hold, which dropLost must then keep owed (Handle.owe).
	contexts int
	// unlocked: an Unlock with a context that carries no hold took the
	// lease, so dropLost owes it nothing. Such a lease was taken once
	// (re-entry needs a context of the hold), so one Unlock pays it.
	unlocked bool
}

// isRedisError reports whether err is an error reply from Redis (READONLY,
// OOM, NOPERM, ...) rather than a network failure.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// newLease prepares a lease of hd with a new owner; outer, when not nil, is
// the write hold it is taken under (a downgrade). A downgrade is a hold of
// its own, with its own owner, field, count and deadline: two downgrades
// under one write hold sharing a field would let one's release or expiry
// end the other's share while its holder still counts on it. Its extra
// argument names the write field it stands on instead of its own would-be
// one (the read script admits a reader beside a writer only on that field).
func newLease(hd *Handle, outer *Lease, weight int) *Lease {
	h := &Lease{e: hd.e, p: hd.p, name: hd.name, handle: hd, outer: outer, dueIndex: -1, weight: weight, forcedSeen: hd.e.forcedN.Load()}
	h.owner = hd.e.newOwner()
	h.field, h.extra = hd.p.Fields(h.owner, weight)
	if outer != nil {
		h.extra = outer.field
	}
	h.ownerArg, h.fieldArg, h.extraArg = &h.owner, &h.field, &h.extra
	return h
}

// Name returns the name of the lock or semaphore.
func (h *Lease) Name() string { return h.name }

// Owner returns the owner id, "<client id>:<n>".
func (h *Lease) Owner() string { return h.owner }

// Field returns the owner's field in Redis.
func (h *Lease) Field() string { return h.field }

// OwnerArg, FieldArg and ExtraArg are the owner, its field and the kind's
// extra argument, boxed for a script's arguments without allocating.
func (h *Lease) OwnerArg() any { return h.ownerArg }

// FieldArg: see OwnerArg.
func (h *Lease) FieldArg() any { return h.fieldArg }

// ExtraArg: see OwnerArg.
func (h *Lease) ExtraArg() any { return h.extraArg }

// Weight returns the units the lease takes: a semaphore's permits, else 1.
func (h *Lease) Weight() int { return h.weight }

// Token returns the lease's fencing token (0 for a permit).
func (h *Lease) Token() uint64 { return h.token }

// Engine returns the engine the lease runs on.
func (h *Lease) Engine() *Engine { return h.e }

// Buf returns the lease's argument buffer for a script call: the attempts
// of an acquisition follow one another, the count-changing calls of a lease
// take turns, and a call whose caller left keeps the turn until its reply
// is in, so a call's buffer is free again by the time the next is built.
func (h *Lease) Buf() []any { return h.argBuf[:0] }

// DriftMargin is how much earlier than its TTL a holder gives its hold up:
// Redlock's allowance for clock drift (1% of the TTL) plus 2ms, so that the
// holder is told before Redis can let the lock move on, even if the two
// clocks' rates differ slightly.
func DriftMargin(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// granted starts the bookkeeping of a new grant: renewal in watchdog mode,
// the local deadline that declares the lease lost, and the engine's
// registry. sent is when the granting call was sent: the TTL started after
// it, since every grant is the reply to an attempt of the caller's own (a
// hand-off message only wakes the waiter, whose attempt then gives the
// lease its TTL). It reports false, with nothing registered, when the
// engine is closing.
func (h *Lease) granted(token uint64, sent time.Time, lease time.Duration) bool {
	if lease > 0 {
		h.lease, h.until = lease, sent.Add(lease)
		return h.begin(token, h.until.Add(-DriftMargin(lease)), time.Time{}, sent)
	}
	// The first renewal is counted from sent, like the TTL: a slow grant
	// must not push it past the lease's validity.
	ttl := h.e.Cfg.Watchdog
	return h.begin(token, sent.Add(ttl-DriftMargin(ttl)), sent.Add(ttl/renew.PerTTL), sent)
}

// adopted starts the bookkeeping of a watchdog hold passed in memory
// (adopt): the Redis hold is the one it was, certain until validUntil, and
// its next renewal falls due a period after the last confirmed one.
func (h *Lease) adopted(token uint64, validUntil time.Time) bool {
	ttl := h.e.Cfg.Watchdog
	confirmed := validUntil.Add(-(ttl - DriftMargin(ttl)))
	return h.begin(token, validUntil, confirmed.Add(ttl/renew.PerTTL), time.Now())
}

// begin is granted's and adopted's bookkeeping: the lease is certain until
// validUntil, renewed from renewAt (zero: a fixed lease, not renewed), and
// bounded by MaxHold from since.
func (h *Lease) begin(token uint64, validUntil, renewAt, since time.Time) bool {
	e := h.e
	h.token, h.start, h.count = token, time.Now(), 1
	unheard := false
	defer func() {
		if unheard {
			h.recheck() // after the unlock below: recheck takes h.mu
		}
	}()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.validUntil = validUntil
	if !renewAt.IsZero() {
		h.renewal = h.p.Renewal(h)
		h.renewal.TTL, h.renewal.Holder, h.renewal.Since = e.Cfg.Watchdog, h, h.start.UnixMilli()
	}
	var ok bool
	if ok, unheard = e.track(h); !ok {
		return false
	}
	if e.Cfg.SpinMin == 0 {
		// Listen on the client channel for a ForceUnlock's news (no-op
		// after the first lease; never blocks).
		e.hub.Listen()
	}
	if h.renewal.Holder != nil {
		h.renewing = true
		e.renewer.Add(&h.renewal, renewAt)
	}
	if h.maxHold > 0 {
		h.maxUntil = since.Add(h.maxHold)
	}
	e.deadlines.add(h, h.deadline())
	return true
}

// Renewed implements renew.Holder.
func (h *Lease) Renewed(sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if long := h.e.Cfg.LongHold; long > 0 && !h.alerted && sent.Sub(h.start) >= long {
		h.alerted = true
		h.e.Detach(func(context.Context) { h.e.heldLong(h.p.Kind(), h.name, sent.Sub(h.start)) })
	}
	h.renewErr = nil
	if h.lease > 0 {
		return // a fixed lease is never renewed: only asked about (recheck)
	}
	ttl := h.e.Cfg.Watchdog
	if v := sent.Add(ttl - DriftMargin(ttl)); v.After(h.validUntil) {
		h.validUntil = v
	}
}

// Lost implements renew.Holder.
func (h *Lease) Lost(code int64) { h.lose(lossError(h.name, GoneReason(code), nil)) }

// Failed implements renew.Holder.
func (h *Lease) Failed(err error) {
	h.mu.Lock()
	h.renewErr = err
	h.mu.Unlock()
}

// deadline is when checkDeadline must next run: the end of the hold's
// validity, or its MaxHold if that comes first. The caller holds h.mu.
func (h *Lease) deadline() time.Time {
	if b, ok := h.bound(); ok && b.Before(h.validUntil) {
		return b
	}
	return h.validUntil
}

// bound is the earliest MaxHold end that applies now: the lease's own, and
// those of the re-entries counted still (innerMax). The caller holds h.mu.
func (h *Lease) bound() (time.Time, bool) {
	var b time.Time
	if h.maxHold > 0 {
		b = h.maxUntil
	}
	for i, t := range h.innerMax {
		if i+2 <= h.count && !t.IsZero() && (b.IsZero() || t.Before(b)) {
			b = t
		}
	}
	return b, !b.IsZero()
}

// checkDeadline runs when the local deadline passes: unless renewal has moved
// it meanwhile, the hold can no longer be vouched for.
func (h *Lease) checkDeadline() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	b, bounded := h.bound()
	maxed := bounded && time.Until(b) <= 0
	if !maxed && time.Until(h.validUntil) > 0 {
		h.e.deadlines.add(h, h.deadline()) // renewed meanwhile
		h.mu.Unlock()
		return
	}
	leaseOver := h.lease > 0 && h.renewal.Holder == nil
	renewErr := h.renewErr
	h.mu.Unlock()
	switch {
	case maxed:
		// Alive but past its bound: renewal stops with the loss, and Redis
		// keeps the lock until its TTL, time for the holder to stop.
		h.lose(lossError(h.name, ErrMaxHold, nil))
	case leaseOver:
		h.lose(lossError(h.name, ErrLeaseEnded, nil))
	case renewErr != nil && isRedisError(renewErr):
		h.lose(lossError(h.name, ErrRenewRefused, renewErr))
	default:
		h.lose(lossError(h.name, ErrUnconfirmed, renewErr))
	}
}

// lose ends the hold with cause; the handle keeps it until Unlock. The loss
// is logged and reported to observers before Done closes, so that whoever
// wakes on Done sees it counted.
func (h *Lease) lose(cause *LossError) {
	// Its holder, who may have let go of every handle (Client.Mutex(name)
	// here and there), still owes it its Unlocks: a collected handle would
	// forget them, and the holder's late Unlock through the next handle of
	// the name would release another goroutine's hold. (After Close no
	// lock call is granted: nothing to keep it for.)
	if !h.e.closed.Load() {
		h.handle.pin(h.e.Cfg.Watchdog)
	}
	h.end(cause, func() {
		h.e.Cfg.Logger.Warn("dlock: lock lost", "name", h.name, "cause", cause)
		for _, o := range h.e.Cfg.Observers {
			o.Lost(h.p.Kind(), h.name, cause)
		}
	})
	// A lock call drops the handle's lost leases as it comes (dropLost);
	// one that came before this loss waits at the gate, which a holder
	// that lets its fixed lease run out (Redisson's habit) never leaves:
	// drop it for that waiter now, when Redis has the hold no longer (its
	// lease ran out; it was forced, taken over or lost with Redis's data).
	// After any other loss the hold may still be in Redis (MaxHold's, one
	// unconfirmed, Close's) and the holder's Unlock (or Close) releases
	// it: a lease dropped first would send nothing, and the waiter would
	// wait out the TTL.
	if hd := h.handle; goneFromRedis(cause) && !hd.p.Shared() && hd.gate.waited() {
		h.e.Detach(func(context.Context) { hd.dropLost() })
	}
}

// goneFromRedis reports whether a loss means Redis no longer has the hold.
func goneFromRedis(cause error) bool {
	return errors.Is(cause, ErrLeaseEnded) || errors.Is(cause, ErrForced) ||
		errors.Is(cause, ErrTakenOver) || errors.Is(cause, ErrDataLost)
}

// end marks the hold over, stops its renewal and deadline, runs before (if
// not nil), closes done and runs the end callbacks. It does nothing if the
// hold had already ended.
func (h *Lease) end(cause error, before func()) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	h.err = cause
	h.e.deadlines.remove(h)
	callbacks := h.onEnd
	h.onEnd = nil
	renewing := h.renewing
	h.renewing = false
	h.mu.Unlock()
	if renewing {
		// Not Remove: a loss must be told at once, not after a renewal call
		// that may hang on the very trouble that caused it.
		h.e.renewer.Cancel(&h.renewal)
	}
	h.e.untrack(h)
	if before != nil {
		before()
	}
	h.mu.Lock()
	if h.done == nil {
		h.done = wire.ClosedCh
	} else {
		close(h.done)
	}
	h.mu.Unlock()
	for _, f := range callbacks {
		f.f(cause)
	}
}

// endFn is a callback registered with onEnded: a pointer, for forgetEnd.
type endFn struct{ f func(error) }

// OnEnded registers f to run when the hold ends (at once if it has).
func (h *Lease) OnEnded(f func(error)) { h.onEnded(f) }

// onEnded is OnEnded, and returns what unregisters f: whoever stops caring
// before the hold ends (a hold context cancelled by its holder) must not
// leave f, and what it holds, on the hold until then.
func (h *Lease) onEnded(f func(error)) (forget func()) {
	h.mu.Lock()
	if !h.ended {
		fn := &endFn{f: f}
		h.onEnd = append(h.onEnd, fn)
		h.mu.Unlock()
		return func() { h.forgetEnd(fn) }
	}
	err := h.err
	h.mu.Unlock()
	f(err)
	return func() {}
}

// forgetEnd unregisters fn (nothing once the hold has ended: end took the
// callbacks).
func (h *Lease) forgetEnd(fn *endFn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.onEnd, fn); i >= 0 {
		h.onEnd = slices.Delete(h.onEnd, i, i+1)
	}
}

// Done returns the channel closed when the hold ends.
func (h *Lease) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == nil {
		h.done = make(chan struct{}) // end closes it
	}
	return h.done
}

// Err returns why the lease was lost (a *LossError), or nil while it is
// held and after its release.
func (h *Lease) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// turn waits for the lease's turn for a count-changing call, or for ctx.
func (h *Lease) turn(ctx context.Context) error { return h.serial.enter(ctx) }

// tryTurn takes the lease's turn if no other call has it.
func (h *Lease) tryTurn() bool { return h.serial.tryEnter() }

func (h *Lease) endTurn() { h.serial.exit() }
