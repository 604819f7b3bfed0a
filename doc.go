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
// A handle behaves like a sync.Mutex: keep one in a struct field, share it
// between request goroutines, and it lets one of them in at a time. Redisson
// makes a lock reentrant per thread; Go has no thread ids, and a goroutine id
// would be wrong anyway (work for one request hops goroutines). What does
// follow a call chain in Go is its context, so that is where a hold lives:
// LockContext, TryLockContext and WithLock's fn receive a context that
// carries the hold, and a lock call made with it (or anything derived from
// it) on the same name by the same Client re-enters and counts, as Redisson's
// hold count does. Nested WithLock calls therefore work, and a loss of the
// outer hold cancels the inner context too. Unlock with such a context
// releases that hold (or, once that hold has ended, reports its end and
// releases nothing else); Unlock with any other context releases the
// Client's hold of the name, as sync.Mutex lets any goroutine unlock (see
// below for read holds).
//
// # Handles are name lookups
//
// Client.Mutex(name) returns the Client's handle on name: the same *Mutex
// every time, for as long as anything refers to it (FairMutex and RWMutex
// likewise, one handle per kind and name). Ask for it wherever it is needed,
// as Redisson code calls getLock(name): c.Mutex("h1").Lock(ctx) in one
// function and c.Mutex("h1").Unlock(ctx) in another take and release one
// hold. Goroutines that lock one name through one Client therefore share one
// handle and wait for each other at it, as at a sync.Mutex (an RWMutex's
// readers share it, as a sync.RWMutex's do), in arrival order, and one at a
// time in Redis. Two Clients are two owners, and so are a Mutex and a
// FairMutex of one name. The Client refers to its handles
// weakly: one that nothing refers to any more (no variable, no hold, no
// waiter) is collected, so looking up millions of names keeps only those in
// use, and the next lookup of that name makes a new handle in the same state
// (no hold, no waiter).
//
// Client.Election, Client.Semaphore, Client.CountDownLatch and
// Client.MultiLock are not lookups: each call returns a new handle. For a
// Semaphore (whose holds are its Permits), a latch (which has no holder) and a
// MultiLock (whose members are looked up) that makes no difference. For an
// Election it does: without a leadership context, Resign and Proclaim act on
// the term won through that very handle; with the leadership context Campaign
// returned, they act on that term through any handle of the name on the same
// Client. (Two Election handles of one name on one Client
// share the election's lock handle, so their Campaigns wait for each other in
// the process.)
//
// When a Mutex or FairMutex hold ends by Unlock while another goroutine waits
// at its handle, the release passes the hold to that goroutine in the same
// script (its own field, its TTL, a new token), and the waiter sends nothing:
// one script per hand-over instead of a release and an acquisition. A
// Mutex's pass also takes the fencing tokens of the passes that may follow,
// so those run no script: the one Redis hold (its field, its TTL and how
// long it is certain, its renewal) goes on from goroutine to goroutine at
// once, and one HEXISTS sent as it does tells the releaser whether Redis
// still had its hold (its Unlock waits for that answer, the next holder
// does not), each
// with a larger token than the last and than any earlier holder's
// elsewhere, and a holder elsewhere after them gets a larger one still. A
// hold with a fixed lease is passed in Redis only. A Mutex passes at most 16
// times in a row and then releases through Redis' queue, so that other
// processes get their turn; a FairMutex passes only while no other process
// queues, so its order across processes holds.
//
// Which hold an Unlock (RUnlock, Extend, HoldCount) with a context that
// carries no hold of the name means: the Client's one hold of the name and
// kind, whichever goroutine or lookup took it. Only the read side of an
// RWMutex can have several at once (readers share): RUnlock then releases
// the one read hold taken with that very context (the ctx given to RLock);
// of several taken with it on the same terms (lease, MaxHold), which no
// caller can tell apart, the most recent, as sync.RWMutex's RUnlock releases
// any reader's share. When none was, or several on different terms, it
// returns an error wrapping ErrAmbiguous and releases nothing: releasing
// another reader's hold would end the share
// that reader counts on (a renewed hold released for a short lease that is
// about to end) while the wrong hold lives on. Readers that run at once
// should unlock with the context ReadContext returns, or each lock and
// unlock with a context of its own (a request's). A refused RUnlock leaves
// the hold renewed until Close: check its error.
//
// Every hold has an owner field of its own ("<client id>:<n>", n never
// reused), so a resent script (go-redis resends after a lost reply) can tell
// its own earlier effect from anyone else's.
//
// # Contexts are law
//
// Every call returns as soon as its ctx is done, whatever Redis does (refuses,
// hangs, answers slowly): a call in flight is left to finish in the
// background, and what it may have done (queued the caller, granted a lock
// nobody will use) is undone once it returns. TryLock's wait bounds the whole
// call the same way, network time included; a wait that ran out while Redis
// did not answer is ErrUnavailable, not a timeout. Unlock with a context that
// has already ended still sends the release, detached and bounded by the
// cleanup timeout (WithCleanupTimeout). Close is bounded by its close timeout.
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
// # Beyond locks
//
// The same machinery (watchdog renewal, loss as a context, direct hand-off)
// gives:
//
//   - Election: Campaign blocks until the caller leads and returns a context
//     cancelled when the leadership is lost (cause wrapping ErrLockLost) or
//     on Resign (ErrResigned); Resign hands the leadership to the next
//     candidate at once; Leader reads the leader's value; Observe pushes each
//     new leader without polling.
//   - Semaphore: n permits across processes, each leased like a lock
//     (Redisson's RPermitExpirableSemaphore) and ending with its holder; a
//     release gives the permit straight to the first queued waiter.
//   - CountDownLatch: a count across processes (Redisson's RCountDownLatch)
//     that Wait waits out; the last CountDown wakes every waiter by an event.
//   - SyncLocker: a sync.Locker over any Locker, for code that needs one.
//   - Client.Locks: every lock, election, semaphore and latch in use in a
//     Redis, by SCAN; Client.Inspect: one lock's holders, TTL, token and
//     waiters.
//
// # How it works
//
// A lock is a Redis hash named after the lock, with one field per owner
// ("<client id>:<owner id>") holding the reentrant hold count, and a TTL: the
// layout Redisson uses, so Java and Go services can share a lock by name.
// Without a lease, the TTL is the watchdog timeout (30s by default) and one
// goroutine per Client renews every held lock every third of it, many locks
// per script call. A process that wants a taken lock queues itself in
// dlock:queue:{name} in the same script call, and the holder's release
// hands the lock straight to the first queued waiter and to nobody else:
// the waiter keeps a blocking pop (BLPOP) of a key of its own in flight, and
// the release fills that key, so the pop's reply is the grant (see "Whom it
// trusts"). A waiter without a pop in flight (beyond the Client's share of
// the connection pool, or where BLPOP is refused) is woken by a message on
// its Client's channel instead, and its next attempt finds the lock its own.
// Releases with nobody queued publish Redisson's "0" on
// redisson_lock__channel:{name}, which dlock waiters also listen to, so
// releases by Redisson wake them too.
//
// # What is guaranteed
//
// While Redis keeps its data and the holder's process keeps running, at most
// one owner holds a lock, and a holder learns that its hold ended (Done is
// closed, Err returns a *LossError wrapping ErrLockLost and the reason, the
// hold's context is cancelled) before its TTL runs out after its last
// confirmed renewal: the holder counts the TTL less a margin for clock drift
// (1% of it plus 2ms, Redlock's allowance) on its own monotonic clock, from
// when the renewing or granting request was sent. Every grant is the reply to
// a request of the holder's own, a hand-off included, or, for a hold passed
// between goroutines of one Client, to the releasing goroutine's request,
// which the process itself sent; a hold passed in memory is that grant
// going on, certain no longer than it was for the goroutine before. Tokens of successive
// holds of one name strictly increase (see the fencing paragraph below). Close
// tells every holder of its client (as a loss wrapping ErrClosed) before it
// releases their locks. The reasons a hold is lost are told apart with
// errors.Is: ErrUnconfirmed (Redis did not confirm in time), ErrTakenOver,
// ErrForced, ErrDataLost, ErrRenewRefused, ErrClosed, ErrLeaseEnded,
// ErrMaxHold and ErrReleaseFailed.
//
// dlock computes no SHA-1 (Redis names a cached script by the SHA1 of its
// source, and dlock asks Redis for it), so a program that imports it starts
// and locks under GODEBUG=fips140=only, where crypto/sha1 panics;
// TestFIPS140Only checks it ("make test-fips" runs it alone).
//
// The same holds for elections and semaphores. An election has at most one
// leader at a time (its lock's holder), and a leader's context is cancelled
// before its lock's TTL runs out after its last confirmed renewal, so before
// another candidate can take over. A semaphore has at most its size in permits
// held at a time (a Permit of AcquireN counts n), and a holder's Permit.Done
// closes before its permit's TTL runs out after its last confirmed renewal.
// SetPermits changes the size; shrinking it below what is held takes nothing
// from the holders, and new permits wait until those held fall below it.
// Semaphore permits expire by the Redis server's clock.
//
// # Whom it trusts
//
// Redis's data is the only source of truth. A pub/sub message wakes a
// waiter, and at most one of its attempts follows; no message makes anyone a
// holder, ends a hold, or tells an observer who leads. A Mutex or FairMutex
// waiter with a watchdog lease (up to a quarter of the go-redis client's
// pool, and 8, per Client) learns of a hand-off as the reply to its own
// blocking pop (BLPOP, on a connection of that pool, of
// dlock:queue:{name}\x1fg:<owner>), which the release that hands it the lock
// fills in the same script: a key, which only a client that may write
// dlock's keys can write, so the reply is the grant and no claim round trip
// follows. A Semaphore waiter pops its permit the same way, from
// dlock:semaphore-queue:{name}\x1fg:<permit id>. Where BLPOP is refused,
// waiters are woken by messages as before.
// What a client sharing the same Redis can do, by what its ACL lets it do:
//
//   - Publish on any channel (the default ACL allows every channel): it can
//     make waiters attempt again, one attempt per message at most for each
//     woken waiter (repeated wake-ups coalesce until the waiter has tried),
//     and make Election.Observe (and a latch's Wait) read Redis again. A
//     message that could let many goroutines of a process through at once
//     (a latch's waiters, an RWMutex's readers) wakes one of them; the
//     others follow only if its attempt got through, so a forged message
//     costs a process one Redis call per kind of waiter, however many wait. A
//     forged "forced" message makes each hold of its lock in the process
//     ask Redis whether it still holds, no more than once per 100ms per
//     hold however many messages come. It
//     cannot grant a lock, a permit or a leadership, end a hold, show a
//     false leader, open a latch, or make a call hang or panic.
//   - Also read dlock's keys and channels (queues, owner fields, tickets,
//     fencing counters, PUBSUB CHANNELS): the same, and no more. Messages
//     crafted from everything readable, or replayed, still only wake.
//     Nothing dlock sends is a secret it relies on.
//   - Write dlock's keys (or run scripts, FLUSHALL, DEBUG, CONFIG): it can
//     break any Redis lock, dlock's or anyone's: delete a held lock, grant
//     one to itself, rewind a fencing counter. No client library can defend
//     against it; keep such users off the keys with ACLs.
//
// ForceUnlock (and dlock unlock --force) breaks locks only: a key of
// another type, or a hash whose fields are not owners with hold counts (a
// read-write lock's mode, an election's leader), is left as it is with
// ErrNotLock, decided inside the script.
//
// # Namespaces and tenants
//
// WithNamespace(ns) puts every key and channel of a Client behind "ns:",
// so that one ACL line per service (~ns:* &ns:* and no @dangerous command)
// keeps tenants of one Redis off each other's locks: with it, one tenant
// can neither take, break, force nor wake the other's locks, and the
// server's ACL LOG stays empty. What a namespace guarantees:
//
//   - It is data, never code. A namespace is 1 to 64 ASCII letters, digits,
//     '_', '.' and '-' (anything else is ErrInvalidArgument, before any
//     network call; the CLI's --namespace and $DLOCK_NAMESPACE alike). The
//     scripts build their channel names with it, and no such character can
//     end or escape a Lua string, match more than itself in an ACL or SCAN
//     pattern, or move a key's hash tag.
//   - Namespaces never nest. A namespace has no ':', so the first ':' of a
//     key ends it: no two (namespace, name) pairs share a key or a channel
//     ("a" with lock "b:x" is "a:b:x", and "a:b" is no namespace), and a
//     tenant's names may hold any character a lock name may.
//   - A Client without a namespace is not a tenant: its names are the keys
//     themselves (Redisson's layout), so its lock "a:x" has namespace a's
//     lock "x" as its hash, and can read or break it. Give it only to those
//     trusted with every lock. It is not the same lock, though: the fencing
//     counter, queue, forced set and channels differ, so the two must not
//     be mixed (tokens would not be ordered across them), and its
//     ForceUnlock of a tenant's lock (one whose tenant fencing counter
//     exists) is refused: force it with the tenant's namespace.
//   - Lock names that begin with "dlock:" are refused: those are dlock's own
//     keys beside a lock (its fencing counter, queue, ...), and a lock of
//     that name would break the lock it belongs to. So are names holding
//     control characters, which would reach an operator's terminal.
//
// What a namespace does not hide: Redis applies ACL key and channel
// patterns to the keys and channels a command touches, not to the names it
// lists. PUBSUB CHANNELS (and SHARDCHANNELS) and SCAN list every active
// channel and every key name of the server, whatever the caller's
// patterns: a tenant allowed them sees the other tenants' lock names (in
// their release channels and keys) and client ids (host name and process
// id, in their client channels). dlock needs neither on any lock path; deny
// them (-pubsub|channels -pubsub|shardchannels -scan) where names are
// confidential, at the cost of Locks and dlock inspect --all, which SCAN.
// dlock doctor warns when the user may list channels.
//
// # What is not guaranteed
//
// The watchdog renews a hold for as long as its process runs, stuck or not:
// bound it with MaxHold (per WithLock call) or WithMaxHold (per Client).
// After that bound the holder is told (ErrMaxHold) while Redis still holds
// the lock, renewal stops, and the lock expires within a watchdog timeout
// unless released first. WithLongHoldAlert reports holds renewed past a
// threshold instead, and a renewed hold's record (dlock:held:{name}, written
// only by renewals, so a short hold costs nothing) shows in Inspect as
// Holder.HeldFor and Holder.Renewals. ForceUnlock tells the evicted holders at once
// through their Client's channel; a hold whose Client was not yet listening
// (it starts to, in the background, at its first grant) asks Redis once it
// is, a grant still on its way to its holder when the message came (a
// reply, a hand-off, a pass between goroutines) asks Redis as it begins,
// and one whose message is lost otherwise learns at its next renewal, up
// to a third of the watchdog timeout later.
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
// A hold passed between goroutines of one Client in memory goes to the next
// goroutine before Redis has answered whether it still had it: when the
// answer (a round trip later) says it was gone (data lost, forced), the
// releasing goroutine's Unlock reports the loss and the next holder is told
// as of any loss, so for that round trip it may have worked on a hold Redis
// no longer had, as any holder may between a loss and its next renewal.
//
// Fencing tokens come from a per-name counter (dlock:fence:{name}) that is
// started from the Redis server's clock in microseconds and then counts one
// per grant; the counter lives 24 hours and is then started again from the
// clock. Tokens therefore keep increasing across lock expiry, DEL, the
// counter's expiry and a restart that lost all data, as long as the server
// clock moved forward in between. A failover to a server whose clock is
// behind the old one's, and that did not receive the counter, can repeat a
// token; a replicated counter carries on. Each sequence's first token is
// kept beside the counter (dlock:fence:{name}\x1fs, with the counter's TTL):
// an Unlock that finds its hold gone compares its token with it, to tell
// Redis losing the lock (ErrDataLost, however soon it was granted again)
// from its own release resent after a lost reply (nil).
//
// Waiting is driven by pub/sub, but a lost message costs at most one re-check
// interval (3s) or the holder's TTL, whichever is shorter. A pub/sub
// connection that goes silent (its peer gone without a reset: a partition,
// a frozen host) is sent a PING after 5s of silence and replaced when the
// PING is not answered within 5s more; every waiter then re-checks. An idle
// Client's pub/sub connection costs Redis that one PING every 5s. A waiter that
// crashed while queued can delay the others by at most the hand-off claim
// window (2s, WithHandoffClaim) plus that interval. A waiter whose caller
// gave up leaves the queue in the background, moments later; a hand-off that
// reaches it meanwhile is passed on.
//
// # The fallback tier (WithFallback)
//
// A Client built WithFallback(sqllock.MySQL(db)) or (sqllock.Postgres(db))
// runs WithLock on Redis while Redis works and on the SQL named lock when it
// does not, behind a circuit breaker. Only infrastructure failures fall back
// (refused or reset connections, timeouts, READONLY, LOADING, MASTERDOWN,
// CLUSTERDOWN, an open breaker); contention, a cancelled ctx and fn's errors
// never do, and fn runs at most once. A SQL lock does not exclude a Redis
// holder, so the tiers follow three rules:
//
//   - Quarantine: a fallback grant waits until the quarantine (the watchdog
//     timeout plus its drift margin, FallbackQuarantine) has passed since
//     this Client last reached Redis, by which time every Redis holder whose
//     Redis is gone has been told of its loss. Redis dying mid-hold
//     therefore never leaves two holders. A call whose wait sees Redis
//     answer again (a holder renewed, and holds on) is refused: WithLock
//     fails with an error wrapping ErrUnavailable.
//   - Recovery: for the recovery window after Redis answers again
//     (FallbackRecovery, at least 10s), and for as long as a fallback call of
//     the name in the same Client waits or holds, Redis grants also take the
//     SQL lock and lift the name's Redis fencing counter above the SQL token,
//     so they wait for fallback holders still inside fn, and later Redis
//     tokens stay above the fallback's. A fallback grant, and a lift that
//     fails (Redis failing again, the caller's ctx ending), leave a lift
//     owed for the name: the Client's Redis grants of that name keep taking
//     the SQL lock, and lifting, until a lift succeeds, whatever the window,
//     since a Redis grant alone would hand out a token below the SQL token
//     fn already ran with (the name's Redis counter counts on from before
//     the outage). Only the Client that owes a lift knows of it: another
//     Client's first grant of such a name after the window can still get a
//     Redis token below that SQL token.
//   - One token order: fallback tokens are above the highest Redis token the
//     Client saw and at least the database clock in microseconds; Redis
//     tokens start from the Redis clock. With clocks in step, tokens of both
//     tiers increase together.
//
// What is not guaranteed: a Client cut off from a Redis that others still
// reach falls back (after its quarantine) and can hold the SQL lock while a
// Redis holder is inside fn. The fencing token exposes it: the later grant's
// token is higher, so the resource rejects the earlier holder's writes.
// FallbackStrict refuses the fallback in that case instead: Clients record
// when they last reached Redis in a table of the fallback database
// (RedisWitness), and a Client falls back only when no other did within the
// quarantine plus a watchdog timeout. A Client that made no Redis call during
// an outage, or that is still falling back after another Client's recovery
// window ended, can likewise overlap a fallback holder; the token exposes it.
//
// Election.Observe reports a leader that vanished without a release (a crash)
// only when the next leader is elected; Leader tells the present state. A
// semaphore's and a latch's waiters wait by pub/sub even with WithSpin.
//
// An operator's DEL of a lock key is indistinguishable, to the holder's
// Unlock, from its own release resent by go-redis: use ForceUnlock, which
// records whom it evicted so they learn ErrForced.
package dlock
