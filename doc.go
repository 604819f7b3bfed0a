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
// # The lock family
//
// Every lock implements Locker (TryLock, Lock, Unlock):
//
//   - Mutex: reentrant exclusive lock (Redisson's RLock).
//   - FairMutex: the same, granted in arrival order across processes (RFairLock).
//   - RWMutex: many readers or one writer (RReadWriteLock); RLocker is its read side.
//   - MultiLock: several locks taken all-or-nothing in sorted name order (RMultiLock).
//
// WithSpin switches a Client's waiting from pub/sub to polling (RSpinLock).
// Each type's documentation gives its Redis layout and guarantees.
//
// # How it works
//
// A lock is a Redis hash named after the lock, with one field per owner
// ("<client id>:<owner id>") holding the reentrant hold count, and a TTL: the
// layout Redisson uses, so Java and Go services can share a lock by name.
// Without a lease, the TTL is the watchdog timeout (30s by default) and one
// goroutine per Client renews every held lock every third of it, many locks
// per script call. A process that wants a taken lock subscribes (once per
// Client) to its hand-off channel and queues itself in dlock:queue:{name};
// the holder's release passes the lock straight to the first queued waiter
// and tells only that waiter's process. Releases with nobody queued publish
// Redisson's "0" on redisson_lock__channel:{name}, which dlock waiters also
// listen to, so releases by Redisson wake them too.
//
// # What is guaranteed
//
// While Redis keeps its data and the holder's process keeps running, at most
// one owner holds a lock, and a holder learns that its hold ended (Done is
// closed, Err wraps ErrLockLost, the WithLock context is cancelled) no later
// than the lock's TTL after its last confirmed renewal, as measured by the
// holder's monotonic clock. (For a lock handed over by a releasing process,
// the TTL is counted from when the hand-off message is read, which assumes
// pub/sub delivery takes a small part of the 2s claim window.) Tokens of
// successive holds of one name strictly increase (see the fencing paragraph
// below). Close tells every holder of its client (as a loss wrapping
// ErrClosed) before it releases their locks.
//
// # What is not guaranteed
//
// A lease lock cannot stop a holder that is paused (GC, swap, SIGSTOP) past
// its TTL from carrying on after the lock went to someone else: the loss
// signal fires when the process runs again, which may be too late. Use the
// fencing token to make the protected resource reject such late writes.
//
// Redis replication is asynchronous: if the primary fails before a grant
// reached a replica, the promoted replica does not know the lock is held and
// may grant it again; WithReplicaAck narrows that window by letting a grant
// count only once n replicas acknowledged it. Redis restarting without
// persistence forgets every lock.
// In both cases the holder learns of the loss at its next renewal.
//
// Fencing tokens come from a per-name counter (dlock:fence:{name}) that is
// started from the Redis server's clock in microseconds and then counts one
// per grant; the counter lives 24 hours and is then started again from the
// clock. Tokens therefore keep increasing across lock expiry, DEL, the
// counter's expiry and a restart that lost all data, as long as the server
// clock moved forward in between. A failover to a server whose clock is
// behind the old one's, and that did not receive the counter, can repeat a
// token; a replicated counter carries on.
//
// Waiting is driven by pub/sub, but a lost message costs at most one re-check
// interval (3s) or the holder's TTL, whichever is shorter. A waiter that
// crashed while queued can delay the others by at most the hand-off claim
// window (2s, WithHandoffClaim) plus that interval.
package dlock
