package dlock

import (
	"testing"
	"time"
)

// A FairMutex waiter in spin mode is live and queued: nothing tells it of a
// hand-off, so it must poll often enough to claim one within the claim
// window, whatever its backoff has grown to. Otherwise the lock handed to it
// expires unclaimed, the next waiter (which arrived later) takes it, and the
// spinner is queued again at the tail: order by arrival is lost among live
// waiters.
func TestFairSpinWaiterKeepsItsTurn(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	admin := rdbFor(t, r)
	const name = "fair-spin-turn"
	claim := WithHandoffClaim(time.Second)
	holder := newClient(t, r, claim).FairMutex(name)
	mustLock(t, &holder.Mutex)
	queue := holder.p.Keys().Queue

	// First in line: a spinner whose backoff is already longer than the
	// claim window.
	spinner := newClient(t, r, claim, WithSpin(4*time.Second, 4*time.Second)).FairMutex(name)
	first := lockAsync(ctx, &spinner.Mutex)
	waitFor(t, "the spinner queued", func() bool { return admin.LLen(ctx, queue).Val() == 1 })
	// Second in line: a waiter woken by pub/sub.
	// No re-checks of its own: only the spinner's polls refresh the queue's
	// TTL below.
	later := newClient(t, r, claim, withRecheck(time.Minute)).FairMutex(name)
	second := lockAsync(ctx, &later.Mutex)
	waitFor(t, "the second waiter queued", func() bool { return admin.LLen(ctx, queue).Val() == 2 })

	// Release right after one of the spinner's polls (each refreshes the
	// queue's TTL): its next poll is at least 2s away.
	ttl := admin.PTTL(ctx, queue).Val()
	waitFor(t, "a poll of the spinner", func() bool {
		d := admin.PTTL(ctx, queue).Val()
		polled := d > ttl
		ttl = d
		return polled
	})
	mustUnlock(t, &holder.Mutex)

	select {
	case err := <-first:
		if err != nil {
			t.Fatal(err)
		}
		mustUnlock(t, &spinner.Mutex)
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		mustUnlock(t, &later.Mutex)
	case err := <-second:
		t.Errorf("the waiter that queued second got the lock first (%v): the spinner, queued first and alive, missed the hand-off to it", err)
		if err == nil {
			mustUnlock(t, &later.Mutex)
		}
		if err := <-first; err == nil {
			mustUnlock(t, &spinner.Mutex)
		}
	}
}
