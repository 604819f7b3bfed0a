package lease

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/wire"
)

// Handle is what every handle of a kind shares: the name, the Protocol, and
// the state of its leases. An exclusive handle (Mutex, FairMutex, an
// RWMutex's write side, an Election) admits one holder at a time through
// its gate, as sync.Mutex does; a shared one (the read side, a Semaphore)
// admits many. A Handle is safe for concurrent use once Init returned.
type Handle struct {
	e       *Engine
	name    string
	p       Protocol
	nameErr error
	gate    gate // exclusive handles: held while a lease occupies the handle

	mu     sync.Mutex
	cur    []*Lease // unfinished leases taken through the handle (at most one when exclusive)
	curBuf [1]*Lease
	last   *Lease // the most recent lease, for Token, Done and Err after it ended
	// owed are lost leases that dropLost finished before their holders
	// unlocked them, oldest first: an Unlock with the context such a lease
	// was taken with, carrying no hold, answers its loss (Current) instead
	// of releasing a hold taken since.
	owed []owedUnlock
}

// owedUnlock is a dropped lost lease and the Unlocks its holder still owes
// it (its hold count), answered as its loss until until.
type owedUnlock struct {
	h     *Lease
	n     int
	until time.Time
}

// maxOwed bounds the owed Unlocks a handle keeps: a caller that never
// unlocks a lease it let expire (lock with a lease, never unlock) must not
// grow it.
const maxOwed = 4

// Init prepares hd for name on e with p. A bad name is kept and reported
// by every call (NameErr).
func (hd *Handle) Init(e *Engine, name string, p Protocol) {
	hd.e, hd.name, hd.p = e, name, p
	hd.cur = hd.curBuf[:0]
	if err := keys.Validate(name); err != nil {
		hd.nameErr = fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
}

// InitInvalid prepares hd to report err on every call.
func (hd *Handle) InitInvalid(e *Engine, name string, err error) {
	hd.e, hd.name, hd.nameErr = e, name, err
	hd.cur = hd.curBuf[:0]
}

// Name returns the handle's name.
func (hd *Handle) Name() string { return hd.name }

// Key returns the Redis key of the handle's lock (its namespace's, when
// the Client has one); "" for a bad name.
func (hd *Handle) Key() string {
	if hd.nameErr != nil || hd.p == nil {
		return ""
	}
	return hd.p.Key()
}

// NameErr returns the error a bad name gives, or nil.
func (hd *Handle) NameErr() error { return hd.nameErr }

// Engine returns the handle's engine.
func (hd *Handle) Engine() *Engine { return hd.e }

// Check refuses a call before any network call: a nil ctx, a bad name, a
// lease below Redis' resolution, a closed Client.
func (hd *Handle) Check(ctx context.Context, lease time.Duration) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case hd.nameErr != nil:
		return hd.nameErr
	case lease > 0 && lease < time.Millisecond:
		return fmt.Errorf("%w: lease %v is below Redis' 1ms resolution", ErrInvalidArgument, lease)
	case hd.e.closed.Load():
		return ErrClosed
	}
	return nil
}

// inherited finds, in the leases ctx carries for this name, the one a call
// of this handle's kind re-enters (reenter), or the write lease a reader
// downgrades from (under). It fails for a call that would upgrade a read
// lease, or that mixes a Mutex with an RWMutex on one name.
func (hd *Handle) inherited(ctx context.Context) (reenter, under *Lease, err error) {
	top := From(ctx, hd.e, hd.name)
	if top == nil {
		return nil, nil, nil
	}
	call := hd.p.Kind()
	var found [kinds]*Lease
	for h := top; h != nil; h = h.outer {
		if k := h.p.Kind(); !h.isFinished() && found[k.family()] == nil {
			found[k.family()] = h
		}
	}
	read, write, mutex := found[familyRead], found[familyWrite], found[familyMutex]
	switch {
	case call == KindRead && read != nil:
		return read, nil, nil
	case call == KindRead && write != nil:
		return nil, write, nil
	case call == KindWrite && write != nil:
		return write, nil, nil
	case call == KindWrite && read != nil:
		return nil, nil, ErrUpgrade
	case call.family() == familyMutex && mutex != nil:
		return mutex, nil, nil
	}
	return nil, nil, fmt.Errorf("%w: the context holds %q as another kind of lock", ErrInvalidArgument, hd.name)
}

// enter takes the handle's gate, waiting until ctx is done; try only tries.
// It first drops the handle's lost leases (dropLost). A waiter of a kind
// that passes (Passer) waits as next, the lease it will take with ttl and
// its fixed lease (0: renewed by the watchdog): the gate may come with the
// hold itself, a baton with its token. A try needs no next (nil).
func (hd *Handle) enter(ctx context.Context, try bool, next *Lease, ttl, lease time.Duration) (baton, bool, error) {
	hd.dropLost()
	switch {
	case hd.p.Shared():
		return baton{}, true, nil
	case try:
		return baton{}, hd.gate.tryEnter(), nil
	case hd.gate.tryEnter():
		return baton{}, true, nil // a free gate costs no waiter: nothing is allocated
	}
	w := &gateWaiter{}
	if _, ok := hd.p.(Passer); ok {
		w.next, w.ttl, w.lease = next, ttl, lease
		w.abandoned = func(b baton) {
			hd.e.Detach(func(ctx context.Context) {
				b.check.wait(ctx) // the Undo must not remove the field before the check reads it
				if b.grants() {
					// Passed to a waiter that had left (or maybe passed):
					// the kind's Undo passes the hold on in Redis, if it
					// is there, as for a grant whose reply came too late.
					if b.field != "" {
						next.field = b.field // passed in memory
					}
					hd.p.Undo(ctx, next, Queueing{}, true)
				}
				hd.gate.exit()
			})
		}
	}
	b, err := hd.gate.enterAs(ctx, w)
	if err != nil {
		return baton{}, false, err
	}
	return b, true, nil
}

// dropLost finishes the handle's leases that were lost and that nobody has
// unlocked yet, so that a new lock call is not kept waiting by them: a
// lease left to expire (Redisson's habit: lock with a lease, never unlock)
// would otherwise keep an exclusive handle's gate, which the Client hands
// out for the name, until Unlock, and pile up in a shared one. Nothing is
// sent: a lost lease is no longer vouched for, and whatever Redis still
// has of it ends by its TTL, as it would for another process, so the new
// lease waits for it there. An Unlock with a dropped lease's context still
// answers its loss, and so, for a while, does one with the context its lock
// call was given when the holder got no other (owe).
func (hd *Handle) dropLost() {
	var lost [4]*Lease
	n := 0
	hd.mu.Lock()
	for _, h := range hd.cur {
		if n < len(lost) && h.Err() != nil {
			lost[n] = h
			n++
			hd.owe(h)
		}
	}
	hd.mu.Unlock()
	for _, h := range lost[:n] {
		// Not while a release of it is in flight (it may be passing the
		// gate on, pass.go) or a recheck: after it, in the background.
		if h.tryTurn() {
			h.finish()
			h.endTurn()
			continue
		}
		h.e.Detach(func(ctx context.Context) {
			if h.turn(ctx) == nil {
				h.finish()
				h.endTurn()
			}
		})
	}
}

// owe records that h's holder still owes it its Unlocks, for as long as the
// watchdog's TTL: time for a holder whose work outlived its hold to finish
// and unlock. Only a holder given no context of its hold (Lock, TryLock)
// owes them so: one given one unlocks with it. A shared handle keeps them
// too: with one read hold left, an RUnlock with any context picks it
// (Current), so a lost reader's late RUnlock would end another reader's
// share; but there a live share taken with the same context goes first
// (shares of one context are interchangeable). A holder of an exclusive
// handle that let its hold expire (Redisson's habit) and locks the name
// again with the same context is answered the old loss by its first
// Unlock, and releases with its second (Handle.Unlock says so): with one
// context, two holders cannot be told apart, and the old loss never
// releases a hold somebody still counts on. The caller holds hd.mu.
func (hd *Handle) owe(h *Lease) {
	for _, o := range hd.owed {
		if o.h == h {
			return
		}
	}
	h.mu.Lock()
	n, handed, unlocked := h.count, h.contexts > 0, h.unlocked
	h.mu.Unlock()
	if n == 0 || handed || unlocked {
		// Nothing owed, owed with the hold's own context, or paid: an
		// Unlock took h already and answers its loss (its release may
		// still be on its way), so a later one with the same context is
		// for a later hold.
		return
	}
	if len(hd.owed) == maxOwed {
		hd.owed = append(hd.owed[:0], hd.owed[1:]...)
	}
	hd.owed = append(hd.owed, owedUnlock{h: h, n: n, until: time.Now().Add(hd.e.Cfg.Watchdog)})
	hd.pin(hd.e.Cfg.Watchdog)
}

// pin keeps hd, and the handle it is part of, from being collected for d:
// the Client's registry refers to its handles weakly, and a lost lease, or
// the Unlocks owed to one, must stay where the holder's next lookup of the
// name finds them (a new handle would know nothing of them).
func (hd *Handle) pin(d time.Duration) {
	time.AfterFunc(d, func() { runtime.KeepAlive(hd) })
}

// owedTo returns the dropped lost lease whose Unlock a ctx that carries no
// hold stands for: the oldest one taken with ctx itself whose Unlocks are
// still owed. An Unlock (spend) pays one of them; Extend and HoldCount
// only look, so that the holder's Unlock after them still answers the loss
// rather than releasing the hold taken after it. The caller holds hd.mu.
func (hd *Handle) owedTo(ctx context.Context, spend bool) *Lease {
	now := time.Now()
	keep := hd.owed[:0]
	var found *Lease
	for _, o := range hd.owed {
		if now.After(o.until) {
			continue
		}
		if found == nil && sameContext(o.h.parent, ctx) {
			found = o.h
			if spend {
				if o.n--; o.n == 0 {
					continue
				}
			}
		}
		keep = append(keep, o)
	}
	clear(hd.owed[len(keep):])
	hd.owed = keep
	return found
}

// paid forgets what h's holder owes it: its Unlock came with its own
// context. The caller holds hd.mu.
func (hd *Handle) paid(h *Lease) {
	for i, o := range hd.owed {
		if o.h == h {
			hd.owed = append(hd.owed[:i], hd.owed[i+1:]...)
			return
		}
	}
}

func (hd *Handle) exit() {
	if !hd.p.Shared() {
		hd.gate.exit()
	}
}

// occupy records a new lease on the handle.
func (hd *Handle) occupy(h *Lease) {
	hd.mu.Lock()
	hd.cur = append(hd.cur, h)
	hd.last = h
	hd.mu.Unlock()
}

// vacate removes a finished lease and frees the gate it took.
func (hd *Handle) vacate(h *Lease) {
	hd.remove(h)
	h.mu.Lock()
	keep := h.passing != nil || h.handed
	h.mu.Unlock()
	if !keep {
		hd.exit() // else a pass gives the gate on (pass.go)
	}
}

// remove takes h out of the handle's unfinished leases.
func (hd *Handle) remove(h *Lease) {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	for i, x := range hd.cur {
		if x == h {
			hd.cur = append(hd.cur[:i], hd.cur[i+1:]...)
			return
		}
	}
}

// Current is the lease an Unlock with ctx releases: the one ctx carries,
// even when it has ended (its release then answers ErrNotHeld or its
// loss), or else, when ctx carries none, the handle's one unfinished lease;
// nil when there is none. A context's hold never stands for another: an
// ended hold's balanced Unlocks must not release the next holder's hold of
// the same handle. Nor does a context that carries none stand for a hold
// taken after a lost one it was given (dropLost finished that one to let
// the next lock call in): its Unlocks, one per count, answer the loss for
// a watchdog TTL after the drop, oldest lost lease first.
//
// A shared handle (the read side) may have several unfinished leases: of
// those, a ctx that carries none names the one taken with ctx itself (the
// context the lock call was given); of several taken with it on the same
// terms, the most recent. When it names none, or several on different
// terms, Current answers an error wrapping ErrAmbiguous: releasing another
// caller's hold would leave its holder without the share it counts on (a
// short lease released for a renewed one) while the wrong hold lives on.
func (hd *Handle) Current(ctx context.Context) (*Lease, error) {
	h, _, err := hd.current(ctx, false)
	return h, err
}

// current is Current; for an Unlock (spend) it also pays what the lease it
// picks is owed: one owed Unlock of a dropped lease, or, for the handle's
// own lease, all of them (owe). shadowed reports an owed loss picked while
// a lease taken with the same context since is live.
func (hd *Handle) current(ctx context.Context, spend bool) (h *Lease, shadowed bool, err error) {
	for h := From(ctx, hd.e, hd.name); h != nil; h = h.outer {
		if h.p.Kind().family() == hd.p.Kind().family() {
			if h.isFinished() {
				hd.mu.Lock()
				hd.paid(h)
				hd.mu.Unlock()
			}
			return h, false, nil
		}
	}
	ctx = callerOf(ctx)
	hd.mu.Lock()
	defer hd.mu.Unlock()
	// Read shares taken with one context are one reader's, and
	// interchangeable (pick): a live one goes before an owed loss. A
	// context that took none of the live leases may be their holder's all
	// the same (Lock with a context with a timeout, Unlock with its
	// parent), so only the owed losses of that very context go first.
	if len(hd.owed) > 0 { // rare: nothing to compare on the common path
		mine := false // a live lease was taken with ctx
		for _, x := range hd.cur {
			mine = mine || sameContext(x.parent, ctx)
		}
		if !hd.p.Shared() || !mine {
			if h := hd.owedTo(ctx, spend); h != nil {
				return h, mine, nil
			}
		}
	}
	h, err = hd.pick(ctx)
	if h != nil && spend {
		h.markUnlocked()
	}
	return h, false, err
}

// pick is the unfinished lease a ctx that carries no hold stands for (see
// Current). The caller holds hd.mu.
func (hd *Handle) pick(ctx context.Context) (*Lease, error) {
	switch len(hd.cur) {
	case 0:
		return nil, nil
	case 1:
		return hd.cur[0], nil
	}
	var mine *Lease
	taken, alike := 0, true
	for _, h := range hd.cur {
		if sameContext(h.parent, ctx) {
			if mine != nil && !mine.sameTerms(h) {
				alike = false
			}
			mine = h
			taken++
		}
	}
	// Holds taken with this very context on the same terms cannot be told
	// apart by their caller, and releasing any of them leaves the same
	// number of shares behind (as sync.RWMutex's RUnlock does): the most
	// recent is released. Refusing would leave it renewed until Close.
	if taken == 1 || taken > 1 && alike {
		return mine, nil
	}
	return nil, fmt.Errorf("%w: this Client has %d %s holds of %q, %d of them taken with this context, "+
		"and the context carries none: unlock with the context the lock call returned (ReadContext, "+
		"LockContext, WithLock's fn) or the one it was given", ErrAmbiguous, len(hd.cur), hd.p.Kind(), hd.name, taken)
}

// sameTerms reports whether h and o were asked for on the same terms: the
// same fixed lease (or none), MaxHold and weight.
func (h *Lease) sameTerms(o *Lease) bool {
	return h.lease == o.lease && h.maxHold == o.maxHold && h.weight == o.weight
}

// sameContext reports whether a and b are the same context. A context is
// nearly always a pointer, compared as one. Other values are compared part
// by part (identical): == would panic on a comparable type that holds an
// uncomparable one (context.WithoutCancel's struct holds its parent, which
// may be a struct holding a map).
func sameContext(a, b context.Context) bool {
	t := reflect.TypeOf(a)
	if t == nil || t != reflect.TypeOf(b) {
		return false
	}
	if t.Kind() == reflect.Pointer {
		return a == b
	}
	return identical(reflect.ValueOf(a), reflect.ValueOf(b))
}

// identical reports whether a and b, of one type, are the same value:
// references (pointers, maps, channels, slices) by address, so that two
// contexts holding equal maps are not the same while one holding the same
// map is; a func is never identical to anything (its address names its
// code, not the closure).
func identical(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() && b.IsNil()
		}
		return identical(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !identical(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Array:
		for i := range a.Len() {
			if !identical(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.UnsafePointer:
		return a.Pointer() == b.Pointer()
	case reflect.Slice:
		return a.Pointer() == b.Pointer() && a.Len() == b.Len()
	case reflect.Func:
		return false
	}
	return a.Equal(b)
}

// Last is the lease Token, Done and Err describe: the current one, or the
// most recent.
func (hd *Handle) Last() *Lease {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if n := len(hd.cur); n > 0 {
		return hd.cur[n-1]
	}
	return hd.last
}

// Token is the fencing token of the handle's current lease, or 0.
func (hd *Handle) Token() uint64 {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if n := len(hd.cur); n > 0 {
		return hd.cur[n-1].token
	}
	return 0
}

// Done is closed when the handle's last lease ends (closed when none).
func (hd *Handle) Done() <-chan struct{} {
	if h := hd.Last(); h != nil {
		return h.Done()
	}
	return wire.ClosedCh
}

// Err is why the handle's last lease was lost, or nil.
func (hd *Handle) Err() error {
	if h := hd.Last(); h != nil {
		return h.Err()
	}
	return nil
}

// Owner is the owner field of the handle's current lease, or "".
func (hd *Handle) Owner() string {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if n := len(hd.cur); n > 0 {
		return hd.cur[n-1].field
	}
	return ""
}

// Unlock releases one hold count of the lease ctx carries or, failing that,
// of the handle's current lease (see Current). The release is sent whatever ctx says, on
// a goroutine of its own bounded by the cleanup timeout; Unlock returns its
// outcome, or as soon as ctx is done.
func (hd *Handle) Unlock(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if hd.nameErr != nil {
		return hd.nameErr
	}
	h, shadowed, err := hd.current(ctx, true)
	if h == nil {
		switch {
		case err != nil:
		case hd.e.closed.Load():
			err = ErrClosed
		default:
			err = ErrNotHeld
		}
		if len(hd.e.Cfg.Observers) > 0 {
			ObserveRelease(hd.e.Cfg.Observers, ctx, hd.p.Kind(), hd.name)(Release{Kind: hd.p.Kind(), Name: hd.name, Err: err, Weight: 1})
		}
		return err
	}
	err = h.Release(ctx, false)
	if err != nil && shadowed {
		err = fmt.Errorf("%w (this Unlock answered an earlier hold taken with this context, lost; "+
			"the hold taken with it since is still held: the next Unlock with it releases that)", err)
	}
	return err
}

// markUnlocked records that an Unlock with a context that carries no hold
// took h (see owe).
func (h *Lease) markUnlocked() {
	h.mu.Lock()
	h.unlocked = true
	h.mu.Unlock()
}

func (h *Lease) isFinished() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.finished
}
