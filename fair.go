package dlock

// FairMutex is a reentrant distributed lock granted in arrival order across
// processes, Redisson's RFairLock. It has every method of Mutex (Lock,
// TryLock, LockContext, TryLockContext, Unlock, Token, Done, Err, HoldCount,
// ForceUnlock, IsLocked, RemainingTTL, Name, Owner) with the same meaning and
// the same concurrency contract; only the order of grants differs. Goroutines
// sharing one handle wait for each other in the process before they queue in
// Redis, one at a time.
//
// # Order
//
// A waiter joins the queue dlock:queue:{name} with one script call when it
// finds the lock taken. A release hands the lock straight to the head of the
// queue and wakes only that waiter's process (on its client channel
// dlock:client:<client id>, one message, no broadcast). A free lock is granted
// to a caller only when the queue is empty: a newcomer never barges past a
// queued waiter, and a queued waiter that re-checks a lock that became free
// (its holder expired) hands it to the head instead of taking it.
//
// A waiter that gives up (ctx cancelled, wait over) leaves the queue at once.
// A waiter whose process crashed while queued is skipped after at most the
// hand-off claim window (WithHandoffClaim, 2s by default): the lock handed to
// it expires after the claim window, and the next re-check by any live waiter
// (at least every 3s) hands it to the following entry. So each dead entry
// delays the queue by at most claim + re-check, never by a lease. A queue left
// by crashed processes only expires as a whole, 12s after the last waiter
// touched it.
//
// Goroutines of one Client queue once: they wait for each other at the
// Client's handle, and an Unlock passes the hold to the next of them in the
// release's own script only while dlock:queue:{name} is empty, so a waiter
// of another process that queued first is never passed over.
//
// Order is by arrival at Redis, among live waiters; a waiter whose Client
// lost its pub/sub connection keeps its place and re-checks when it is
// back, unless its turn came meanwhile: a hand-off it did not claim within
// the claim window (WithHandoffClaim) goes to the next waiter, and the
// waiter queues again behind the others at its next attempt.
// In spin mode (WithSpin) a FairMutex still queues and polls for its turn.
//
// # Redis layout, and where it differs from Redisson's
//
// The lock hash and fencing counter are the Mutex's (see Mutex).
// Redisson's RFairLock keeps its queue in redisson_lock_queue:{name} (a list
// of thread ids) and the waiters' deadlines in redisson_lock_timeout:{name}
// (a sorted set scored by the client's clock, 5s per waiter, later 5min —
// a known source of hangs). dlock uses one list, dlock:queue:{name}, of
// "<ticket> <ttl ms> <client id>:<n>" entries, and no deadlines at all:
// a dead entry is bounded by the claim window of the hand-off it receives,
// measured by Redis' own key expiry, so no client clock is involved. A
// Redisson RFairLock and a dlock FairMutex on one name do not share a queue.
type FairMutex struct {
	Mutex
}

// FairMutex returns the Client's handle on the fair lock name: the same
// *FairMutex for the same name, as Client.Mutex does (a FairMutex and a
// Mutex of one name are two handles). An invalid name is reported by the
// handle's first method call. Safe for concurrent use.
func (c *Client) FairMutex(name string) *FairMutex {
	return lookup(&c.handles, handleKey{handleFair, name}, c, newFairMutex)
}

func newFairMutex(c *Client, name string) (*FairMutex, bool) {
	f := &FairMutex{}
	f.init(c, name, true)
	return f, f.hd.NameErr() == nil
}
