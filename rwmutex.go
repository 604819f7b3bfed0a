package dlock

import (
	"context"
	"time"

	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
)

// RWMutex is a handle on a distributed read-write lock, Redisson's
// RReadWriteLock: many readers, or one writer. It has a read side (RLock,
// TryRLock, RUnlock, or RLocker) and a write side (Lock, TryLock, Unlock),
// with the wait and lease semantics of Mutex, watchdog renewal of both
// sides, loss signals and a fresh fencing token on every grant of either
// side (read grants draw from the same counter, so a reader's token is above
// every earlier writer's).
//
// Like sync.RWMutex, one handle shared by goroutines admits one writer at a
// time, or any number of readers; Client.RWMutex returns the same handle for
// the same name. Both sides are reentrant along the call chain, as Mutex
// is: a call whose ctx carries a hold of the name re-enters it
// (WriteContext and ReadContext return such a context; so does WithLock).
//
// Unlock and RUnlock release the hold their ctx carries. With a ctx that
// carries none, Unlock releases the Client's write hold; RUnlock releases
// the Client's one read hold of the name, or of several, the one taken with
// that very ctx (of several taken with it on the same terms, the most
// recent), and otherwise returns an error wrapping ErrAmbiguous and
// releases nothing (see RUnlock): concurrent readers unlock with
// ReadContext's context, or each with a context of its own.
//
// # Rules
//
//   - Readers share the lock; a writer excludes readers and other writers.
//   - Downgrade: a read lock call whose ctx carries the write hold takes the
//     read side beside it, as a read hold of its own (its own owner field,
//     token, count and deadline: two downgrades under one write hold are two
//     read holds, and neither's release or expiry ends the other's share);
//     after the final write Unlock the read holds go on and other readers
//     may join. ReadContext's context of a downgrade carries ctx's values
//     and deadline and ends when ctx is cancelled, but not when ctx ends
//     because the write hold did.
//   - Upgrade: a write lock call whose ctx carries only a read hold of the
//     name returns ErrUpgrade at once, without a network call. It never
//     waits: two readers upgrading would wait for each other forever. A
//     write call with a context that carries no hold (RLock(ctx), then
//     Lock(ctx) with context.Background() or a request's ctx) cannot be
//     told from another goroutine's that shares the context, and waits for
//     the read holds like one, as sync.RWMutex's Lock after RLock does:
//     until ctx ends, holding new readers back meanwhile. Upgrade with the
//     context the read call returned (ReadContext), which is refused.
//   - Writers are not starved: while a writer waits, no new read hold is
//     granted (re-entries of existing read holds and the writer's own
//     downgrade still are). A writer therefore waits only for the read holds
//     in progress when it arrived, however steady the stream of readers. A
//     waiting writer that crashed holds readers back for at most the re-check
//     interval plus the hand-off claim window (5s by default). The price is
//     that readers can wait behind a steady stream of writers, and writers
//     among themselves are not served in arrival order.
//   - A crashed reader's share ends at its own deadline (its lease, or the
//     watchdog timeout after its last renewal), whatever the other readers
//     do, and never earlier than theirs.
//
// # Waking
//
// Waiting is Redisson's: waiters subscribe to redisson_rwlock:{name} and
// retry when woken (there is no hand-off queue). The last reader's release
// publishes "0", which wakes one waiting writer per process (or, where a
// process has no waiting writer, its readers); a writer's final release
// publishes "1", which wakes every waiter. Waiters also re-check at least
// every 3s and when the earliest read deadline passes.
//
// # Redis layout, and where it differs from Redisson's
//
// The key is the name itself, a hash as Redisson keeps it: "mode" is "read"
// or "write", the field "<client id>:<n>" counts the owner's read holds and
// "<client id>:<n>:write" the writer's write holds; the
// hash's TTL covers the longest hold. Redisson gives each read hold a key
// {name}:<owner>:rwlock_timeout:<n> and its watchdog renews every reader's
// keys together, so one live reader keeps a crashed reader's share alive.
// dlock instead keeps one deadline per reader, by the server's clock, in the
// sorted set dlock:readers:{name}, renews only its own reader's deadline, and
// drops expired readers from the hash on every script call. A writer that
// downgraded keeps its own deadline there too ("<owner>:write"), so that
// its write hold ends in Redis when its holder is told, however long its
// read holds last. A re-entry of either side never moves a hold's end. Waiting writers
// are kept in the sorted set dlock:wwait:{name} (Redisson has no such
// promise). dlock:fence:{name} holds the last fencing token and
// dlock:forced:{name} the owners ForceUnlock evicted, as for Mutex. A Redisson writer and dlock readers exclude each other through the
// mode field; mixing Redisson and dlock readers on one name is not supported
// (Redisson's readers carry no dlock deadline).
//
// An RWMutex is safe for concurrent use.
type RWMutex struct {
	name string
	p    kind.RWMutex
	w, r lease.Handle
}

// RWMutex returns the Client's handle on the read-write lock name: the
// same *RWMutex for the same name, as Client.Mutex does. An invalid name is
// reported by the first method call. Safe for concurrent use.
func (c *Client) RWMutex(name string) *RWMutex {
	return lookup(&c.handles, handleKey{handleRW, name}, c, newRWMutex)
}

func newRWMutex(c *Client, name string) (*RWMutex, bool) {
	rw := &RWMutex{name: name}
	rw.w.Init(c.e, name, &rw.p.Write)
	rw.r.Init(c.e, name, &rw.p.Read)
	if rw.w.NameErr() != nil {
		return rw, false
	}
	rw.p.Init(c.e, name)
	return rw, true
}

// Name returns the lock's name.
func (rw *RWMutex) Name() string { return rw.name }

// Lock takes the write side in watchdog mode, waiting until it is free or ctx
// is done. See Mutex.Lock; it returns ErrUpgrade when ctx carries only a read
// hold of the name.
func (rw *RWMutex) Lock(ctx context.Context) error {
	_, err := rw.w.Acquire(ctx, lease.Request{Forever: true})
	return err
}

// TryLock tries to take the write side, waiting up to wait; see
// Mutex.TryLock. It returns ErrUpgrade when ctx carries only a read hold.
func (rw *RWMutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	h, err := rw.w.Acquire(ctx, request(wait, lease))
	return h != nil && err == nil, err
}

// WriteContext is TryLock returning the write hold's context; see
// Mutex.TryLockContext.
func (rw *RWMutex) WriteContext(ctx context.Context, wait, lease time.Duration) (context.Context, error) {
	return lockContext(ctx, &rw.w, request(wait, lease))
}

// Unlock releases one write hold; see Mutex.Unlock.
func (rw *RWMutex) Unlock(ctx context.Context) error { return rw.w.Unlock(ctx) }

// Extend gives the current write hold lease from now; see Mutex.Extend.
func (rw *RWMutex) Extend(ctx context.Context, lease time.Duration) error {
	return extend(ctx, &rw.w, lease)
}

// RExtend gives the read hold ctx carries (or else the one RUnlock with
// ctx would release) lease from now; see Mutex.Extend. A read hold's share of the lock in
// Redis is never shortened by it: other readers may rely on it.
func (rw *RWMutex) RExtend(ctx context.Context, lease time.Duration) error {
	return extend(ctx, &rw.r, lease)
}

// RLock takes the read side in watchdog mode, waiting while a writer holds
// the lock or waits for it.
func (rw *RWMutex) RLock(ctx context.Context) error {
	_, err := rw.r.Acquire(ctx, lease.Request{Forever: true})
	return err
}

// TryRLock tries to take the read side, waiting up to wait; wait and lease
// mean what they mean for Mutex.TryLock.
func (rw *RWMutex) TryRLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	h, err := rw.r.Acquire(ctx, request(wait, lease))
	return h != nil && err == nil, err
}

// ReadContext is TryRLock returning the read hold's context; see
// Mutex.TryLockContext. For a downgrade (ctx carries the write hold) the
// context carries ctx's values and deadline and ends with the read hold or
// when ctx is cancelled or its deadline passes, but not when ctx ends
// because the write hold ended: the read hold outlives it. Safe for
// concurrent use.
func (rw *RWMutex) ReadContext(ctx context.Context, wait, lease time.Duration) (context.Context, error) {
	return lockContext(ctx, &rw.r, request(wait, lease))
}

// RUnlock releases one read hold: the read hold ctx carries, or else, when
// ctx carries none of the name, the Client's one read hold of the name,
// whichever goroutine or lookup took it. Only the read side can have
// several holds at once (readers share); RUnlock then releases the one
// taken with that very ctx (the ctx given to RLock), and of several taken
// with it on the same terms (lease, MaxHold), which no caller can tell
// apart, the most recent, as sync.RWMutex's RUnlock releases any reader's
// share. When none was taken with ctx, or several on different terms, it
// returns an error wrapping ErrAmbiguous and changes nothing: releasing
// another reader's hold would end the share that reader counts on (a
// renewed hold released for a short lease that is about to end) while the
// wrong hold lives on. Readers that run at once should unlock with the
// context ReadContext returns, or each lock and unlock with a context of
// its own (a request's). A refused RUnlock leaves the hold renewed until
// Close: check its error. A lost read hold's late RUnlock with the ctx its
// RLock was given answers the loss, as a Mutex's Unlock does, and never
// ends another reader's share; while a read hold taken with that same ctx
// is live, it releases that one instead (shares of one context are one
// reader's). See Mutex.Unlock for the rest.
func (rw *RWMutex) RUnlock(ctx context.Context) error { return rw.r.Unlock(ctx) }

// Token returns the fencing token of the current write hold, or 0.
func (rw *RWMutex) Token() uint64 { return rw.w.Token() }

// RToken returns the fencing token of the most recent read hold, or 0.
func (rw *RWMutex) RToken() uint64 { return rw.r.Token() }

// Done is closed when the current write hold ends; see Mutex.Done.
func (rw *RWMutex) Done() <-chan struct{} { return rw.w.Done() }

// Err returns why the current or last write hold was lost; see Mutex.Err.
func (rw *RWMutex) Err() error { return publicErr(rw.w.Err()) }

// RLocker returns the read side as a Member (and so a Locker): its TryLock,
// Lock and Unlock are TryRLock, RLock and RUnlock of this handle.
func (rw *RWMutex) RLocker() Member { return &readLocker{rw} }

type readLocker struct{ rw *RWMutex }

func (l *readLocker) Name() string { return l.rw.name }

func (l *readLocker) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	return l.rw.TryRLock(ctx, wait, lease)
}

func (l *readLocker) Lock(ctx context.Context) error   { return l.rw.RLock(ctx) }
func (l *readLocker) Unlock(ctx context.Context) error { return l.rw.RUnlock(ctx) }

// Token returns the fencing token of the most recent read hold, or 0.
func (l *readLocker) Token() uint64 { return l.rw.RToken() }

// Done is closed when the most recent read hold ends.
func (l *readLocker) Done() <-chan struct{} { return l.rw.r.Done() }

// Err returns why the most recent read hold was lost.
func (l *readLocker) Err() error { return publicErr(l.rw.r.Err()) }
