// Package dlock provides distributed locks for Go services that share Redis:
// Redisson's RLock semantics, its data layout, and what Go engineers expect
// from a production lock — loss notification as a context, fencing tokens,
// event-driven waiting, typed errors, and no leaks.
//
// # Using it
//
// Create one Client per process from a go-redis client and take handles from
// it. The everyday form is WithLock:
//
//	c, err := dlock.New(rdb)
//	...
//	err = c.WithLock(ctx, "coupon:42", func(ctx context.Context) error {
//		// ctx is cancelled with cause dlock.ErrLockLost if the lock is lost.
//		return issueCoupon(ctx)
//	})
//
// For explicit control, a Mutex handle has Lock, TryLock(ctx, wait, lease)
// and Unlock with Redisson's meaning of wait and lease, plus Done and Err to
// learn that a hold was lost, and Token for its fencing token.
//
// # Ownership follows the context
//
// A handle behaves like a sync.Mutex: keep it in a struct field, share it
// between goroutines, and it lets one of them in at a time. Redisson makes a
// lock reentrant per thread; Go has no thread ids, and one request's work
// hops goroutines, so a hold lives in a context: LockContext, TryLockContext
// and WithLock's fn get one, and a lock call with it (or a context derived
// from it) on the same name and Client re-enters and counts. So WithLock
// nests, and a loss of the outer hold cancels the inner context too. Unlock
// with that context releases that hold; with any other, the Client's hold of
// the name, as sync.Mutex lets any goroutine unlock (see Mutex.Unlock and
// RWMutex.RUnlock).
//
// # Handles are name lookups
//
// Client.Mutex(name) returns the same *Mutex for the same name (FairMutex
// and RWMutex likewise), so c.Mutex("h1").Lock(ctx) in one function and
// c.Mutex("h1").Unlock(ctx) in another take and release one hold, as with
// Redisson's getLock(name); goroutines of one Client wait for each other at
// that handle (see Mutex). Election, Semaphore, CountDownLatch and MultiLock
// return a new handle per call (see Client.Election).
//
// # Contexts are law
//
// Every call returns as soon as its ctx is done, whatever Redis does
// (refuses, hangs, answers slowly): a call in flight finishes in the
// background, and what it may have done (queued the caller, granted a lock
// nobody will use) is then undone. TryLock's wait bounds the whole call,
// network time included; a wait that ran out while Redis did not answer is
// ErrUnavailable, not a timeout. Unlock with an ended context still sends
// the release (WithCleanupTimeout bounds it), and WithCloseTimeout bounds
// Close.
//
// # The lock family
//
// Every lock implements Locker (TryLock, Lock, Unlock):
//
//   - Mutex: reentrant exclusive lock (Redisson's RLock).
//   - FairMutex: the same, granted in arrival order across processes
//     (RFairLock).
//   - RWMutex: many readers or one writer (RReadWriteLock); RLocker is its
//     read side.
//   - MultiLock: several locks, all or nothing, in sorted name order
//     (RMultiLock).
//
// WithSpin switches a Client's waiting from pub/sub to polling (RSpinLock).
// Each type's documentation gives its Redis layout and guarantees.
//
// # Beyond locks
//
// The same machinery (watchdog renewal, loss as a context, direct hand-off)
// gives:
//
//   - Election: Campaign blocks until the caller leads and returns a context
//     that ends with the leadership; Resign hands it to the next candidate at
//     once; Leader reads the leader; Observe pushes each new one.
//   - Semaphore: n permits across processes, each leased like a lock and
//     handed on release to the first waiter (RPermitExpirableSemaphore).
//   - CountDownLatch: a count across processes (Redisson's RCountDownLatch)
//     that Wait waits out; the last CountDown wakes every waiter by an event.
//   - SyncLocker: a sync.Locker over any Locker, for code that needs one.
//   - Client.Locks lists what is in use in a Redis; Client.Inspect shows a
//     lock's holders, TTL, token and waiters.
//
// WithFallback adds a SQL lock tier (package sqllock) for WithLock to use
// when Redis fails.
//
// # How it works
//
// A lock is a Redis hash named after the lock, with one field per hold
// holding the reentrant hold count, and a TTL: the layout Redisson uses, so
// Java and Go services can share a lock by name. Without a lease, the TTL is
// the watchdog timeout (30s by default) and one goroutine per Client renews
// every held lock every third of it, many locks per script call. A process that wants a taken lock queues
// itself in dlock:queue:{name} in the same script call, and the release
// hands the lock straight to the first queued waiter and to nobody else. A
// release with nobody queued publishes Redisson's "0" on
// redisson_lock__channel:{name}, which dlock waiters also listen to, so
// releases by Redisson wake them too.
//
// # What is guaranteed
//
//   - While Redis keeps its data and the holder's process keeps running, at
//     most one owner holds a lock.
//   - A holder learns that its hold ended (Done is closed, Err returns a
//     *LossError, the hold's context is cancelled; see ErrLockLost for the
//     reasons) before its TTL, less a margin for clock drift (1% of it plus
//     2ms, Redlock's allowance), runs out after its last confirmed renewal,
//     counted on its own monotonic clock from when the renewing or granting
//     request was sent.
//   - Every grant is the reply to a request the holder's process sent (see
//     Mutex for holds passed between goroutines).
//   - Tokens of successive holds of one name strictly increase (Mutex.Token).
//   - Close tells every holder (a loss wrapping ErrClosed) before it releases
//     their locks.
//   - The same holds for elections (at most one leader, told of its loss
//     before another candidate can take over: see Election) and semaphores
//     (at most their size in permits held: see Semaphore and Permit).
//   - WithNamespace keeps the tenants of one Redis off each other's locks.
//   - dlock computes no SHA-1 (Redis names a cached script by the SHA1 of its
//     source, and dlock asks Redis for it), so a program that imports it
//     starts and locks under GODEBUG=fips140=only, where crypto/sha1 panics
//     ("make test-fips" runs TestFIPS140Only, which checks it).
//
// # Whom it trusts
//
// Redis's data is the only source of truth. A pub/sub message wakes a
// waiter, and at most one of its attempts follows; no message makes anyone a
// holder, ends a hold, or tells an observer who leads (a hand-off comes in a
// key: see Mutex). What a client sharing the same Redis can do, by what its
// ACL lets it do:
//
//   - Publish on any channel (the default ACL allows every channel): make
//     waiters attempt again, at most once per message for each woken waiter,
//     and make Election.Observe and a latch's Wait read Redis again (see
//     Client for what each message costs). It cannot grant a lock, a permit
//     or a leadership, end a hold, show a false leader, open a latch, or
//     make a call hang or panic.
//   - Also read dlock's keys and channels (queues, owner fields, tickets,
//     fencing counters, PUBSUB CHANNELS): no more. Messages crafted from
//     everything readable, or replayed, still only wake: nothing dlock sends
//     is a secret it relies on.
//   - Write dlock's keys (or run scripts, FLUSHALL, DEBUG, CONFIG): break any
//     Redis lock, dlock's or anyone's: delete a held lock, grant one to
//     itself, rewind a fencing counter. No client library can defend against
//     that; keep such users off the keys with ACLs (see WithNamespace).
//
// # What is not guaranteed
//
//   - A lease lock cannot stop a holder paused (GC, swap, SIGSTOP) past its
//     TTL from carrying on after the lock went to someone else: it learns of
//     the loss when it runs again, which may be too late. Have the protected
//     resource reject its late writes by their fencing token.
//   - Redis replication is asynchronous: if the primary fails before a grant
//     reached a replica, the promoted replica may grant the lock again
//     (WithReplicaAck narrows that window), and a restart without
//     persistence forgets every lock; the holder learns of the loss at its
//     next renewal. A failover can also repeat a token (see Mutex.Token).
//   - The watchdog renews a hold for as long as its process runs, stuck or
//     not: bound it with MaxHold or WithMaxHold, or report it with
//     WithLongHoldAlert.
//   - A hold passed between goroutines may be used for a round trip after
//     Redis lost it (see Mutex).
//   - A lost pub/sub message delays a waiter by up to a re-check interval
//     (3s), and a waiter that crashed while queued delays the others by up
//     to the hand-off claim window plus that interval (see Mutex).
//   - ForceUnlock tells evicted holders at once, but one whose message is
//     lost learns at its next renewal; an operator's DEL of a lock key is not
//     told apart from the holder's own resent release (see
//     Mutex.ForceUnlock).
//   - A namespace does not hide lock names from a tenant allowed SCAN or
//     PUBSUB CHANNELS (see WithNamespace).
//   - A Client cut off from a Redis that others still reach can fall back
//     and overlap a Redis holder; the fencing token exposes it (see
//     WithFallback).
package dlock
