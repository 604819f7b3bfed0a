package dlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/renew"
)

// hold is one continuous possession of a lock by one owner, from the grant
// to the final release or the loss. Its owner field is new for every hold and
// never reused, so a script that finds the field knows it is this hold's.
// Re-entries share the hold and count up.
type hold struct {
	c    *Client
	p    protocol
	name string
	ks   *keys.Set
	keys []any // the scripts' keys, boxed once per handle

	owner      string // "<client id>:<n>"
	ownerField string // the owner's field in the hash: the owner, or owner+":write"
	writeField string // a reader's would-be write field, for rlock.lua's downgrade check
	// The three above as script arguments: pointers, boxed without
	// allocating (go-redis writes a *string as the string).
	ownerArg, fieldArg, writeFieldArg any

	handle *handle         // whose gate and state the hold occupies
	outer  *hold           // the hold it was taken under (a downgrading writer's write hold)
	parent context.Context // the context the hold was asked for with

	token uint64
	start time.Time
	lease time.Duration // > 0: a fixed lease, never renewed past until
	until time.Time     // the fixed lease's end
	// maxHold > 0 ends the hold at maxUntil (MaxHold, WithMaxHold).
	maxHold  time.Duration
	maxUntil time.Time

	renewal  renew.Entry
	renewing bool // renewal is registered with the watchdog

	// argBuf holds a Mutex's script arguments (intCmd).
	argBuf [14]any

	// serial admits one re-entry or release call at a time: each sends the
	// count it expects, which must not be read twice.
	serial gate
	// rechecking: a recheck (forced.go) is in flight.
	rechecking atomic.Bool

	// The local deadline's place in the Client's deadlines (guarded by
	// their lock).
	dueAt    time.Time
	dueIndex int

	mu         sync.Mutex
	count      int
	done       chan struct{} // made when asked for (doneCh), closed when the hold ends
	ended      bool          // released or lost
	finished   bool          // the final release ran; the handle is free again
	err        error         // the loss (a *LossError); nil when released
	validUntil time.Time     // the hold is certain until then (monotonic clock)
	// certainAtRelease: the final release was sent before validUntil.
	certainAtRelease bool
	renewErr         error // the last renewal failure, for the loss reason
	onEnd            []func(error)
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// errReleased is the cause of a hold's context after its final Unlock.
var errReleased = errors.New("dlock: lock released")

// isRedisError reports whether err is an error reply from Redis (READONLY,
// OOM, NOPERM, ...) rather than a network failure.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// newHold prepares a hold of hd with a new owner; outer, when not nil, is a
// hold of the same owner it is taken under (a write hold downgrading).
func newHold(hd *handle, outer *hold) *hold {
	c := hd.c
	h := &hold{c: c, p: hd.p, name: hd.name, ks: &hd.ks, keys: hd.keys, handle: hd, outer: outer, dueIndex: -1}
	if outer != nil {
		h.owner = outer.owner
	} else {
		h.owner = c.id + ":" + strconv.FormatUint(c.owners.Add(1), 10)
	}
	h.ownerField = h.owner
	switch hd.p.(type) {
	case writeProtocol:
		h.ownerField = h.owner + ":write"
	case readProtocol:
		h.writeField = h.owner + ":write"
	}
	h.ownerArg, h.fieldArg, h.writeFieldArg = &h.owner, &h.ownerField, &h.writeField
	return h
}

// driftMargin is how much earlier than its TTL a holder gives its hold up:
// Redlock's allowance for clock drift (1% of the TTL) plus 2ms, so that the
// holder is told before Redis can let the lock move on, even if the two
// clocks' rates differ slightly.
func driftMargin(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// granted starts the bookkeeping of a new grant: renewal in watchdog mode,
// the local deadline that declares the hold lost, and the client's registry.
// sent is when the granting call was sent: the TTL started after it, since
// every grant is the reply to an attempt of the caller's own (a hand-off
// message only wakes the waiter, whose attempt then gives the hold its TTL).
// It reports false, with nothing registered, when the client is closing.
func (h *hold) granted(token uint64, sent time.Time, lease time.Duration) bool {
	c := h.c
	h.token, h.start, h.count = token, time.Now(), 1
	h.mu.Lock()
	defer h.mu.Unlock()
	period := c.cfg.watchdog / 3
	if lease <= 0 {
		ttl := c.cfg.watchdog
		h.validUntil = sent.Add(ttl - driftMargin(ttl))
		h.renewal = renew.Entry{Key: h.ks.Lock, Field: h.ownerField, Kind: h.p.renewKind(), TTL: c.cfg.watchdog, Holder: h}
	} else {
		h.lease, h.until = lease, sent.Add(lease)
		h.validUntil = h.until.Add(-driftMargin(lease))
	}
	if h.p.renewKind() == 'r' {
		h.renewal.Set = h.ks.Readers
	}
	if !c.track(h) {
		return false
	}
	if c.cfg.spinMin == 0 {
		// Listen on the client channel for a ForceUnlock's news (no-op
		// after the first hold; never blocks).
		c.hub.Listen()
	}
	if h.renewal.Holder != nil {
		h.renewing = true
		// Counted from sent, like the TTL: a slow grant must not push the
		// first renewal past the hold's validity.
		c.renewer.Add(&h.renewal, sent.Add(period))
	}
	if h.maxHold > 0 {
		h.maxUntil = sent.Add(h.maxHold)
	}
	c.deadlines.add(h, h.deadline())
	return true
}

// Renewed implements renew.Holder.
func (h *hold) Renewed(sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewErr = nil
	if h.lease > 0 {
		return // a fixed lease is never renewed: only asked about (recheck)
	}
	ttl := h.c.cfg.watchdog
	if v := sent.Add(ttl - driftMargin(ttl)); v.After(h.validUntil) {
		h.validUntil = v
	}
}

// Lost implements renew.Holder.
func (h *hold) Lost(code int64) { h.lose(lossError(h.name, goneReason(code), nil)) }

// Failed implements renew.Holder.
func (h *hold) Failed(err error) {
	h.mu.Lock()
	h.renewErr = err
	h.mu.Unlock()
}

// deadline is when checkDeadline must next run: the end of the hold's
// validity, or its MaxHold if that comes first. The caller holds h.mu.
func (h *hold) deadline() time.Time {
	if h.maxHold > 0 && h.maxUntil.Before(h.validUntil) {
		return h.maxUntil
	}
	return h.validUntil
}

// checkDeadline runs when the local deadline passes: unless renewal has moved
// it meanwhile, the hold can no longer be vouched for.
func (h *hold) checkDeadline() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	maxed := h.maxHold > 0 && time.Until(h.maxUntil) <= 0
	if !maxed && time.Until(h.validUntil) > 0 {
		h.c.deadlines.add(h, h.deadline()) // renewed meanwhile
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
func (h *hold) lose(cause *LossError) {
	h.end(cause, func() {
		h.c.cfg.logger.Warn("dlock: lock lost", "name", h.name, "cause", cause)
		for _, o := range h.c.cfg.observers {
			o.Lost(h.p.kind(), h.name, cause)
		}
	})
}

// end marks the hold over, stops its renewal and deadline, runs before (if
// not nil), closes done and runs the end callbacks. It does nothing if the
// hold had already ended.
func (h *hold) end(cause error, before func()) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	h.err = cause
	h.c.deadlines.remove(h)
	callbacks := h.onEnd
	h.onEnd = nil
	renewing := h.renewing
	h.renewing = false
	h.mu.Unlock()
	if renewing {
		// Not Remove: a loss must be told at once, not after a renewal call
		// that may hang on the very trouble that caused it.
		h.c.renewer.Cancel(&h.renewal)
	}
	h.c.untrack(h)
	if before != nil {
		before()
	}
	h.mu.Lock()
	if h.done == nil {
		h.done = closedCh
	} else {
		close(h.done)
	}
	h.mu.Unlock()
	for _, f := range callbacks {
		f(cause)
	}
}

// onEnded registers f to run when the hold ends (at once if it has).
func (h *hold) onEnded(f func(error)) {
	h.mu.Lock()
	if !h.ended {
		h.onEnd = append(h.onEnd, f)
		h.mu.Unlock()
		return
	}
	err := h.err
	h.mu.Unlock()
	f(err)
}

// doneCh returns the channel closed when the hold ends.
func (h *hold) doneCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == nil {
		h.done = make(chan struct{}) // end closes it
	}
	return h.done
}

func (h *hold) lostErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// holdsKey is the context key under which a Client's holds travel: one
// key per Client, whose value lists the holds of every name the context
// carries, innermost first. (A struct holding one pointer is boxed without
// allocating, so a lookup costs nothing.)
type holdsKey struct{ c *Client }

// ctxHolds is one hold a context carries, and the ones it was taken under.
type ctxHolds struct {
	h    *hold
	prev *ctxHolds
}

// holdFrom returns the innermost hold of name by c that ctx carries.
func holdFrom(ctx context.Context, c *Client, name string) *hold {
	for n, _ := ctx.Value(holdsKey{c}).(*ctxHolds); n != nil; n = n.prev {
		if n.h.name == name {
			return n.h
		}
	}
	return nil
}

// context returns a context that carries the hold (for re-entry, Unlock,
// GrantFrom and TokenFrom) and is cancelled when the hold ends or parent is
// done; the cause is the hold's loss, or errReleased.
func (h *hold) context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	prev, _ := parent.Value(holdsKey{h.c}).(*ctxHolds)
	ctx = context.WithValue(ctx, holdsKey{h.c}, &ctxHolds{h: h, prev: prev})
	ctx = ContextWithGrant(ctx, Grant{Name: h.name, Token: h.token, Backend: BackendRedis})
	h.onEnded(func(err error) {
		if err == nil {
			err = errReleased
		}
		cancel(err)
	})
	return ctx, func() { cancel(context.Canceled) }
}

// intCmd builds an EVALSHA of s with its arguments in the hold's own buffer:
// the attempts of an acquisition follow one another, the count-changing
// calls of a hold take turns (turn) and a call whose caller left keeps the
// turn until its reply is in, so a call's buffer is free again by the time
// the next call is built.
func (h *hold) intCmd(s *script, keys []any, args ...any) *redis.IntCmd {
	buf := append(h.argBuf[:0], "evalsha", s.sha, len(keys))
	buf = append(buf, keys...)
	buf = append(buf, args...)
	cmd := redis.NewIntCmd(context.Background(), buf...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// turn waits for the hold's turn for a count-changing call, or for ctx.
func (h *hold) turn(ctx context.Context) error { return h.serial.enter(ctx) }

// tryTurn takes the hold's turn if no other call has it.
func (h *hold) tryTurn() bool { return h.serial.tryEnter() }

func (h *hold) endTurn() { h.serial.exit() }
