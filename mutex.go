package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
)

// Mutex is a handle on a reentrant distributed lock, Redisson's RLock.
//
// A Mutex behaves like a sync.Mutex shared by any number of goroutines: it
// lets one caller in at a time, and a Lock by another goroutine (or by the
// same one with an unrelated context) waits until the hold is released.
// Re-entry follows the call chain instead of a thread: a lock call whose ctx
// descends from a hold of the same name by the same Client (the context
// LockContext returns, or the one WithLock passes to fn) re-enters that hold
// and counts, and Unlock with such a ctx counts down; the lock is released
// when the count reaches zero. Go has no thread ids, and sharing a handle
// between request goroutines is how Go code uses a mutex, so the context,
// which does follow the call chain, carries ownership (see the package doc).
//
// Client.Mutex returns the same handle for the same name (a handle is a
// name lookup: see Client.Mutex), so the handle's hold is the Client's hold
// of the name, whichever goroutine or lookup took it. Unlock with a context
// that carries no hold of the name releases that hold, as sync.Mutex lets
// any goroutine unlock. Token, Done and Err describe the handle's current
// hold (or its last one).
//
// A Mutex is safe for concurrent use.
//
// Waiting: goroutines that lock one name through one Client share its
// handle and wait for each other at it, in arrival order, and one at a
// time in Redis. A process that finds the lock taken queues itself in
// dlock:queue:{name} in the same script call, and the release hands the lock
// straight to the first queued waiter and to nobody else. A waiter with a
// watchdog lease (up to a quarter of the go-redis client's pool, and 8, per
// Client) keeps a blocking pop (BLPOP, on a connection of that pool) of a
// key of its own, dlock:queue:{name}\x1fg:<owner>, in flight, and the
// release that hands it the lock fills that key in the same script. Only a
// client that may write dlock's keys can write that key, so the pop's reply
// is the grant and no claim round trip follows. A waiter without a pop in
// flight (beyond that share of the pool, or where BLPOP is refused) is woken
// by a message on its Client's channel instead, and its next attempt finds
// the lock its own. A lost message costs a waiter at most one re-check
// interval (3s) or the holder's TTL, whichever is shorter. A waiter that
// crashed while queued can delay the others by at most the hand-off claim
// window (2s, WithHandoffClaim) plus that interval. A waiter whose caller
// gave up leaves the queue in the background, moments later; a hand-off
// that reaches it meanwhile is passed on.
//
// Passing between goroutines: when a Mutex or FairMutex hold ends by Unlock
// while another goroutine waits at its handle, the release passes the hold
// to that goroutine in the same script (its own field, its TTL, a new
// token), and the waiter sends nothing: one script per hand-over instead of
// a release and an acquisition. A Mutex's pass also takes the fencing tokens
// of the passes that may follow, so those run no script: the one Redis hold
// (its field, its TTL and how long it is certain, its renewal) goes on from
// goroutine to goroutine at once, each with a larger token than the last
// and than any earlier holder's elsewhere, and a holder elsewhere after them
// gets a larger one still. One HEXISTS, sent as the hold passes, tells the
// releaser whether Redis still had its hold: its Unlock waits for that
// answer, the next holder does not. A hold with a fixed lease is passed in
// Redis only. A Mutex passes at most 16 times in a row and then releases
// through Redis' queue, so that other processes get their turn; a FairMutex
// passes only while no other process queues, so its order across processes
// holds.
//
// A hold passed in memory is the releasing goroutine's grant going on,
// certain no longer than it was for the goroutine before; that grant was
// the reply to the releasing goroutine's request, which the process itself
// sent. The hold goes to the next goroutine before Redis has answered
// whether it still had it: when the answer (a round trip later) says it was
// gone (data lost, forced), the releasing goroutine's Unlock reports the
// loss and the next holder is told as of any loss, so for that round trip
// it may have worked on a hold Redis no longer had, as any holder may
// between a loss and its next renewal.
//
// Redis layout (Redisson's): the key is the name, a hash whose field
// "<client id>:<n>" (n new for every hold and never reused, so that a
// script go-redis resends after a lost reply can tell its own earlier effect
// from anyone else's) holds the hold count, with a TTL;
// a release publishes "0" on "redisson_lock__channel:{name}" when nobody is
// queued. dlock adds dlock:fence:{name} (the fencing counter, restarted from
// the server clock every 24h), dlock:queue:{name} (processes waiting for a
// direct hand-off, with a TTL) and dlock:forced:{name} (owners ForceUnlock
// evicted, so they learn why). A name with a hash tag T uses
// "dlock:fence:{T}:name" and so on, so that no two names share a key.
type Mutex struct {
	hd lease.Handle
	p  kind.Mutex
}

// Mutex returns the Client's handle on the reentrant lock name: the same
// *Mutex every time, for as long as anything refers to it. Ask for it
// wherever it is needed, as Redisson code calls getLock(name):
// Mutex(name).Lock here and Mutex(name).Unlock there take and release one
// hold. Goroutines that lock one name through one Client therefore share one
// handle and wait for each other at it (see Mutex). Two Clients are two
// owners of a name, and so are a Mutex and a FairMutex of one name: a
// Client has one handle per kind and name.
//
// The Client refers to its handles weakly: one that nothing refers to any
// more (no variable, no hold, no waiter) is collected, so looking up
// millions of names keeps only those in use, and the next lookup of that
// name makes a new handle in the same state (no hold, no waiter). An
// invalid name is reported by the handle's first method call. Safe for
// concurrent use.
func (c *Client) Mutex(name string) *Mutex {
	return lookup(&c.handles, handleKey{handleMutex, name}, c, newMutex)
}

func newMutex(c *Client, name string) (*Mutex, bool) {
	m := &Mutex{}
	m.init(c, name, false)
	return m, m.hd.NameErr() == nil
}

func (m *Mutex) init(c *Client, name string, fair bool) {
	m.hd.Init(c.e, name, &m.p)
	if m.hd.NameErr() == nil {
		m.p.Init(c.e, name, fair)
	}
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.hd.Name() }

// Owner returns the owner field ("<client id>:<n>") of the handle's current
// hold, or "" when it holds nothing.
func (m *Mutex) Owner() string { return m.hd.Owner() }

// TryLock tries to acquire the lock, waiting up to wait for it. wait <= 0
// makes exactly one attempt (and does not wait for another goroutine's hold
// of the handle either). lease > 0 makes the lock expire lease after the
// grant, never renewed; lease <= 0 selects watchdog mode: the lock's TTL is
// the watchdog timeout, renewed every third of it until Unlock.
//
// It returns (true, nil) once held (or re-entered, when ctx carries the
// hold), (false, nil) when the wait ran out, and (false, err) for a
// failure, never (true, err): ErrInvalidArgument, ErrClosed, ErrUnavailable
// when Redis did not answer within the wait, a Redis error, an error
// wrapping ErrLockLost, or, once ctx is done, an error that matches both
// ctx.Err() and ctx's cause (errors.Is(err, context.Canceled) holds when
// ctx was cancelled, and errors.Is(err, cause) for a WithCancelCause cause,
// a hold's loss or ErrReleased). The wait's own end is never reported as
// context.DeadlineExceeded while ctx is live. The wait bounds the whole
// call, network time included, and TryLock returns as soon as ctx is done.
//
// ErrLockLost comes from a re-entry of a hold that was lost, and from a new
// grant whose reply took more than a third of its TTL to arrive: such a
// grant is confirmed by one renewal before it is used, and when that finds
// the lock no longer ours (it expired meanwhile) the grant is given up and
// nobody relied on it.
//
// A re-entry never waits, keeps the hold's mode and never moves its end: a
// re-entry's lease is ignored, and the hold ends in Redis when its holder
// is told (its own lease, or the watchdog's renewals stopping).
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	h, err := m.hd.Acquire(ctx, request(wait, lease))
	return h != nil && err == nil, err
}

// Lock acquires the lock in watchdog mode, waiting as long as it takes or
// until ctx is done, in which case it returns ctx's cause at once.
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.hd.Acquire(ctx, lease.Request{Forever: true})
	return err
}

// LockContext is Lock returning a context that carries the hold: lock calls
// with it (or a context derived from it) on the same name re-enter, Unlock
// with it releases this hold, TokenFrom and GrantFrom read it, and it is
// cancelled when the hold ends (cause wrapping ErrLockLost when lost) or ctx
// is done.
func (m *Mutex) LockContext(ctx context.Context) (context.Context, error) {
	return lockContext(ctx, &m.hd, lease.Request{Forever: true})
}

// TryLockContext is TryLock returning the hold's context (see LockContext);
// when the wait runs out it returns an error wrapping ErrWaitTimeout.
func (m *Mutex) TryLockContext(ctx context.Context, wait, lease time.Duration) (context.Context, error) {
	return lockContext(ctx, &m.hd, request(wait, lease))
}

func request(wait, d time.Duration) lease.Request { return lease.Request{Wait: wait, Lease: d} }

func lockContext(ctx context.Context, hd *lease.Handle, req lease.Request) (context.Context, error) {
	h, err := hd.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: %q not acquired within %v", ErrWaitTimeout, hd.Name(), req.Wait)
	}
	return holdContext(ctx, hd, h), nil
}

// holdContext is the context of h, just taken through hd with ctx: ctx
// itself for a re-entry, else a context of the hold under ctx.
func holdContext(ctx context.Context, hd *lease.Handle, h *lease.Lease) context.Context {
	if lease.From(ctx, hd.Engine(), hd.Name()) == h {
		// A re-entry: ctx carries the hold already, and ends with it. Its
		// innermost grant may be another lock's, taken under this one: the
		// context returned carries this lock's (TokenFrom fences with it).
		if g, ok := lease.GrantFrom(ctx); !ok || g.Name != h.Name() || g.Token != h.Token() {
			ctx = lease.ContextWithGrant(ctx, h.Grant())
		}
		return ctx
	}
	// A read hold taken under the write hold (a downgrade) outlives it: its
	// context has ctx's values and deadline but does not end with the
	// write hold's.
	hctx, _ := h.ContextBeside(ctx)
	return hctx
}

// Unlock releases one hold count: of the hold ctx carries, or else, when
// ctx carries no hold of the name, of the handle's current hold. A ctx whose
// hold has ended never stands for another hold: Unlock then answers the
// loss or ErrNotHeld and releases nothing else. Nor does the ctx a Lock or
// TryLock was given stand for a hold taken after that hold was lost: when
// another goroutine of the Client took the name meanwhile, the lost
// holder's Unlocks with that ctx (one per count, for a watchdog timeout
// after the other took it) answer the loss, oldest lost hold first, so
// that its late Unlock never ends the new holder's hold. One context cannot
// tell two holders apart: a caller that let a hold expire (Redisson's habit)
// and locks the name again with the same context gets the old loss from its
// first Unlock, with word that the new hold is still held, and releases
// that with the next; give each holder a context of its own (a request's)
// to avoid it. A fixed lease that runs out unreleased lets in the lock
// calls of the Client that wait for it; after any other loss they wait for
// the holder's Unlock, which releases what Redis may still hold. The lock is free (or handed to the next waiter)
// when the count reaches zero.
//
// The release is sent even when ctx is already done, as is the hold's own
// context once the hold was lost: it goes on in the background, bounded by
// the cleanup timeout, and Unlock returns at once with an error that says
// so and matches ctx.Err() and ctx's cause with errors.Is (for a lost
// hold's context, ErrLockLost too). Unlock with a context that
// carries the hold but not its cancellation (context.WithoutCancel) waits
// for the release's own answer. A release of a count other than the last
// whose reply was lost is resent in the background the same way, before
// any other call of the hold changes its count, and Unlock answers an error
// that wraps the one it got.
//
// It returns ErrNotHeld when there is no hold to release, and an error
// wrapping ErrLockLost, at every count, when the hold had been lost (the
// protected work may have overlapped another holder's). On any error from
// the final release the handle holds nothing afterwards: the lock expires by
// its TTL at the latest.
func (m *Mutex) Unlock(ctx context.Context) error { return m.hd.Unlock(ctx) }

// Extend gives the hold ctx carries (or else the handle's current hold,
// as Unlock picks it) lease from now, when it was taken with a fixed lease;
// its loss deadline moves with it. It returns ErrInvalidArgument for lease
// <= 0 and for a hold renewed by the watchdog, ErrNotHeld or an error
// wrapping ErrLockLost for a hold that ended, and ctx's cause once ctx is
// done. Redis's TTL is never shortened: a lease less than what is left
// moves the hold's deadline (Done closes then, and Unlock still releases)
// but not the key's, so that an Extend that lands late cannot cut short a
// later one. An Extend that got no answer may still run in Redis, and
// leaves the hold's deadline where it was.
func (m *Mutex) Extend(ctx context.Context, lease time.Duration) error {
	return extend(ctx, &m.hd, lease)
}

func extend(ctx context.Context, hd *lease.Handle, d time.Duration) error {
	if err := hd.Check(ctx, d); err != nil {
		return err
	}
	if d <= 0 {
		return fmt.Errorf("%w: Extend needs a lease > 0, got %v", ErrInvalidArgument, d)
	}
	h, err := hd.Current(ctx)
	if h == nil {
		if err == nil {
			err = ErrNotHeld
		}
		return err
	}
	return h.Extend(ctx, d)
}

// ForceUnlock releases the lock whoever holds it, handing it to the next
// queued waiter or waking Redisson-style waiters, and reports whether it was
// held. Holders are told at once, with a loss wrapping ErrForced: the
// script sends each evicted owner's Client a message, on which it asks
// Redis. The exceptions:
//
//   - A hold whose Client was not yet listening asks once it is. A Client
//     starts to listen, in the background, at its first grant, so this is
//     the case of a force moments after that grant.
//   - A grant still on its way to its holder when the message came (a
//     reply, a hand-off, a pass between goroutines) asks as it begins.
//   - A hold whose message is lost otherwise, or whose Client uses WithSpin
//     or sharded pub/sub, learns at its next renewal, up to a third of the
//     watchdog timeout later; one with a fixed lease, which has no renewal,
//     when its lease ends.
//
// A key that is not a lock — another Redis type, or a hash whose fields are
// not owners with hold counts (a read-write lock's mode, an election's
// leader) as dlock and Redisson write them — is left as it is, with an
// error wrapping ErrNotLock; the script decides, atomically, and dlock
// unlock --force does the same. A Client without a namespace refuses, with
// ErrInvalidArgument, a name "ns:rest" that namespace ns's Client uses as
// its lock rest (one whose tenant fencing counter exists): force it with
// that namespace (see WithNamespace).
//
// Use ForceUnlock, not DEL: an operator's DEL of a lock key is
// indistinguishable, to the holder's Unlock, from its own release resent by
// go-redis, while ForceUnlock records whom it evicted so they learn
// ErrForced.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.hd.Check(ctx, 0); err != nil {
		return false, err
	}
	return m.p.Force(ctx)
}

// IsLocked reports whether any owner holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if err := m.hd.Check(ctx, 0); err != nil {
		return false, err
	}
	return m.p.IsLocked(ctx)
}

// HoldCount returns the hold count of the hold ctx carries, or else of the
// handle's current hold, as Redis has it (0 when there is none).
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	if err := m.hd.Check(ctx, 0); err != nil {
		return 0, err
	}
	h, err := m.hd.Current(ctx)
	if h == nil {
		return 0, err
	}
	return m.p.HoldCount(ctx, h.Field())
}

// RemainingTTL returns the lock's remaining time to live, whoever holds it:
// 0 when it is not held.
func (m *Mutex) RemainingTTL(ctx context.Context) (time.Duration, error) {
	if err := m.hd.Check(ctx, 0); err != nil {
		return 0, err
	}
	return m.p.RemainingTTL(ctx)
}

// Token returns the fencing token of the handle's current hold, or 0 when it
// holds nothing. Tokens of successive holds of one name strictly increase;
// pass the token to the resource you protect and have it reject writes that
// carry a token lower than one it has seen.
//
// Tokens come from a per-name counter, dlock:fence:{name}, that is started
// from the Redis server's clock in microseconds and then counts one per
// grant; the counter lives 24 hours and is then started again from the
// clock. Tokens therefore keep increasing across lock expiry, DEL, the
// counter's expiry and a restart that lost all data, as long as the server
// clock moved forward in between. A failover to a server whose clock is
// behind the old one's, and that did not receive the counter, can repeat a
// token; a replicated counter carries on. Each sequence's first token is
// kept beside the counter (dlock:fence:{name}\x1fs, with the counter's TTL):
// an Unlock that finds its hold gone compares its token with it, to tell
// Redis losing the lock (ErrDataLost, however soon it was granted again)
// from its own release resent after a lost reply (nil).
func (m *Mutex) Token() uint64 { return m.hd.Token() }

// Done returns a channel that is closed when the handle's current hold ends:
// by the final Unlock, or by its loss (see Err). When the handle holds
// nothing it returns a closed channel.
func (m *Mutex) Done() <-chan struct{} { return m.hd.Done() }

// Err returns why the handle's current or most recent hold was lost (a
// *LossError wrapping ErrLockLost), or nil while it is held and when it
// ended by Unlock.
func (m *Mutex) Err() error { return publicErr(m.hd.Err()) }
