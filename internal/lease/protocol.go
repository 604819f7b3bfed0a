package lease

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

// Protocol is what differs between kinds (mutex, fair, read, write,
// semaphore): which scripts a kind runs, with which keys and arguments, and
// how its replies read. Everything else (waiting, hand-off, renewal, loss,
// release) is the engine's and the same for every kind. One Protocol value
// serves one handle and holds its keys; its methods are safe for concurrent
// use.
type Protocol interface {
	Kind() Kind
	// Key is the key the kind's holds live in (the lock hash, the
	// semaphore's set): what ForceUnlock's news names.
	Key() string
	// Shared reports whether one handle admits many holds at once (readers,
	// permits) instead of one at a time.
	Shared() bool
	// Fields returns the owner's field in Redis and the kind's extra
	// argument (a reader's would-be write field), for a new owner taking
	// weight units (Request.Weight: a semaphore's permits; 1 elsewhere).
	Fields(owner string, weight int) (field, extra string)
	// Attempt builds one try at a new hold (count 0) or a re-entry (count >
	// 0); AttemptReply decodes its reply.
	Attempt(l *Lease, ttl time.Duration, count int, q Queueing) *wire.Call
	AttemptReply(cmd redis.Cmder, count int) (Reply, error)
	// Release builds the undoing of count holds, or of all of them;
	// ReleaseReply decodes its reply.
	Release(l *Lease, count int, all bool) *wire.Call
	ReleaseReply(cmd redis.Cmder) (Released, error)
	// Undo takes back what an attempt may have left in Redis: its queue
	// entry (passing on a hand-off that reached it) and, when mayHold, a
	// grant whose reply was lost. Failures are logged, not returned: what is
	// left expires.
	Undo(ctx context.Context, l *Lease, q Queueing, mayHold bool)
	// Channel is where the kind's waiters listen for releases, and whether
	// they wait to share the lock (readers: a "0" wakes them all when no
	// exclusive waiter of the process waits) rather than for it alone.
	Channel() (channel string, shared bool)
	// Entry is a waiter's queue entry for ticket (0: a waiter that polls
	// and listens for nothing), or "" when the kind does not queue.
	Entry(ticket uint64, ttl time.Duration, l *Lease) string
	// Renewal returns the renewal entry of l's holds (without Holder and
	// TTL, which the engine fills in).
	Renewal(l *Lease) renew.Entry
}

// Passer is a Protocol of an exclusive kind whose final release can pass
// the hold straight to another goroutine of the process that waits at the
// handle's gate (lock cohorting). A pass in Redis frees the releaser's
// field and gives next's its TTL and new fencing tokens in one script; the
// waiter is told in memory, and sends nothing. A kind with spare tokens
// (Spare) lets the holder that got them pass the hold on in memory, with no
// script: the field, its TTL and its renewal go on at once, each new holder
// takes the next spare token, and one HEXISTS tells the releaser whether
// Redis still had its hold (pass.go's passCheck).
type Passer interface {
	// MayPass reports whether the handle may pass after inRow passes in a
	// row; false sends the release through Redis (others' turn).
	MayPass(inRow int) bool
	// Spare is how many tokens beyond the next holder's own a pass in
	// Redis takes, for passes in memory (0: none).
	Spare() int
	// Pass builds the final release of l's one hold as a pass to next,
	// with ttl; a pass the script cannot make is a plain release.
	Pass(l, next *Lease, ttl time.Duration) *wire.Call
	// PassReply decodes Pass's reply: a release's answer, and the highest
	// token taken, or 0 when the script released instead of passing.
	PassReply(cmd redis.Cmder) (Released, uint64, error)
}

// Queueing is a waiter's standing in a wait list, sent with its attempts.
type Queueing struct {
	Entry      string // the queue entry; "" when not queueing
	Registered bool   // an earlier attempt registered it
	// Handoff is set for the attempt that follows a hand-off message naming
	// the waiter: the lock is most likely its own already, and the kind may
	// send a call that checks that first. The call must still decide from
	// what Redis holds (the message may be forged or stale).
	Handoff bool
}

// Reply is an attempt's outcome, decoded by the kind.
type Reply struct {
	Granted bool
	Token   uint64        // a new hold's fencing token
	Count   int           // a re-entry's hold count
	Gone    bool          // a re-entry found the hold gone
	Wait    time.Duration // not granted: until the holder's TTL ends; < 0 unknown
}

// Released is a release's outcome, decoded by the kind.
type Released struct {
	Found     bool  // the owner's field was there and counted down
	Remaining int   // the holds left
	Why       int64 // not found: why the field is missing (a renew code)
}
