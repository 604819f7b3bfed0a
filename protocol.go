package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// protocol is what differs between lock kinds: which scripts a kind runs,
// with which keys and arguments, and how its waiters listen. The waiting
// state machine (acquire.go) and the hold (hold.go) are the same for all.
type protocol interface {
	kind() Kind
	// attempt sends one try at a new hold (count 0) or a re-entry (count > 0).
	attempt(ctx context.Context, h *hold, ttl time.Duration, count int, q queueing) *redis.Cmd
	// release undoes one hold of count, or all of them.
	release(ctx context.Context, h *hold, count int, all bool) *redis.Cmd
	// leave undoes what a waiter that gives up may have left behind: its
	// queue entry, a hand-off that reached it, a grant whose reply was lost.
	// It returns nil when there is nothing to undo.
	leave(ctx context.Context, h *hold, q queueing) *redis.Cmd
	// channel is the release channel its waiters listen on.
	channel(h *hold) string
	// shared reports whether holds of this kind share the lock (readers).
	shared() bool
	// handsOff reports whether a release may hand the lock straight to a
	// queued waiter of this kind (Mutex, FairMutex).
	handsOff() bool
	// renewKind is renew.lua's kind for holds of this kind.
	renewKind() byte
}

// queueing is a waiter's standing in a lock's wait list, sent with its
// attempts.
type queueing struct {
	entry      string // the queue entry (keys.QueueEntry); "" when not queueing
	registered bool   // an earlier attempt registered it
}

// reply is what the lock scripts answer: at most three integers, read
// without allocating.
type reply struct {
	n int
	v [3]int64
}

func readReply(cmd *redis.Cmd) (reply, error) {
	var r reply
	v, err := cmd.Result()
	if err != nil {
		return r, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) > len(r.v) {
		return r, fmt.Errorf("dlock: unexpected script reply %v", v)
	}
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return r, fmt.Errorf("dlock: unexpected script reply %v", v)
		}
		r.v[i] = n
	}
	r.n = len(arr)
	return r, nil
}

// Why an owner's field is missing, as renew.lua and the release scripts
// answer it (lib.lua's GONE, FORCED and DATA_LOST; a test checks they agree).
const (
	goneCode     = 0
	forcedCode   = 2
	dataLostCode = 3
)

// goneReason maps a why_gone code to the loss reason it means.
func goneReason(code int64) error {
	switch code {
	case forcedCode:
		return ErrForced
	case dataLostCode:
		return ErrDataLost
	}
	return ErrTakenOver
}

// mutexProtocol is the reentrant lock's, fair or not: Redisson's hash, a
// wait queue for direct hand-off.
type mutexProtocol struct{ fair bool }

var (
	protoMutex = mutexProtocol{}
	protoFair  = mutexProtocol{fair: true}
)

func (p mutexProtocol) kind() Kind {
	if p.fair {
		return KindFair
	}
	return KindMutex
}

func (p mutexProtocol) attempt(ctx context.Context, h *hold, ttl time.Duration, count int, q queueing) *redis.Cmd {
	a := &h.c.arg
	var entry, registered, fair any = "", "0", "0"
	if q.entry != "" {
		entry = q.entry
	}
	if q.registered {
		registered = "1"
	}
	if p.fair {
		fair = "1"
	}
	return scriptAcquire.run(ctx, h.c.rdb, h.keys[:3],
		h.fieldArg, ttlArg(h.c, ttl), count, entry, registered, a.queueTTLMs, a.fenceTTLMs, fair, a.claimMs)
}

func (mutexProtocol) release(ctx context.Context, h *hold, count int, all bool) *redis.Cmd {
	a := &h.c.arg
	return scriptRelease.run(ctx, h.c.rdb, h.keys, h.fieldArg, count, a.claimMs, a.fenceTTLMs, flag(all), h.token)
}

func (mutexProtocol) leave(ctx context.Context, h *hold, q queueing) *redis.Cmd {
	// Even without an entry: a grant whose reply was lost is this owner's,
	// and leave.lua passes it on.
	a := &h.c.arg
	return scriptLeave.run(ctx, h.c.rdb, h.keys[:3], q.entry, h.fieldArg, a.claimMs, a.fenceTTLMs)
}

func (mutexProtocol) channel(h *hold) string { return h.ks.Channel }
func (mutexProtocol) shared() bool           { return false }
func (mutexProtocol) handsOff() bool         { return true }
func (mutexProtocol) renewKind() byte        { return 'm' }

// writeProtocol is an RWMutex's write side: Redisson's RReadWriteLock hash,
// waiting writers registered so that new readers hold back.
type writeProtocol struct{}

func (writeProtocol) kind() Kind { return KindWrite }

func (writeProtocol) attempt(ctx context.Context, h *hold, ttl time.Duration, count int, q queueing) *redis.Cmd {
	a := &h.c.arg
	var waitMs any = "0"
	if q.entry != "" {
		waitMs = a.writerWaitMs
	}
	return scriptRWLock.run(ctx, h.c.rdb, h.keys, h.ownerArg, h.fieldArg, ttlArg(h.c, ttl), count, waitMs, a.fenceTTLMs)
}

func (writeProtocol) release(ctx context.Context, h *hold, count int, all bool) *redis.Cmd {
	return scriptRWUnlock.run(ctx, h.c.rdb, h.keys, h.fieldArg, count, flag(all), "w", h.token, h.c.arg.fenceTTLMs)
}

func (writeProtocol) leave(ctx context.Context, h *hold, q queueing) *redis.Cmd {
	return scriptRWLeave.run(ctx, h.c.rdb, h.keys, h.ownerArg)
}

func (writeProtocol) channel(h *hold) string { return h.ks.RWChannel }
func (writeProtocol) shared() bool           { return false }
func (writeProtocol) handsOff() bool         { return false }
func (writeProtocol) renewKind() byte        { return 'w' }

// readProtocol is an RWMutex's read side: a field per reader in the same
// hash, and a deadline per reader by the server's clock.
type readProtocol struct{}

func (readProtocol) kind() Kind { return KindRead }

func (readProtocol) attempt(ctx context.Context, h *hold, ttl time.Duration, count int, _ queueing) *redis.Cmd {
	return scriptRLock.run(ctx, h.c.rdb, h.keys, h.fieldArg, h.writeFieldArg, ttlArg(h.c, ttl), count, h.c.arg.fenceTTLMs)
}

func (readProtocol) release(ctx context.Context, h *hold, count int, all bool) *redis.Cmd {
	return scriptRWUnlock.run(ctx, h.c.rdb, h.keys, h.fieldArg, count, flag(all), "r", h.token, h.c.arg.fenceTTLMs)
}

func (readProtocol) leave(context.Context, *hold, queueing) *redis.Cmd { return nil }
func (readProtocol) channel(h *hold) string                            { return h.ks.RWChannel }
func (readProtocol) shared() bool                                      { return true }
func (readProtocol) handsOff() bool                                    { return false }
func (readProtocol) renewKind() byte                                   { return 'r' }

func ttlArg(c *Client, ttl time.Duration) any {
	if ttl == c.cfg.watchdog {
		return c.arg.watchdogMs
	}
	return ms(ttl)
}

func flag(b bool) any {
	if b {
		return "1"
	}
	return "0"
}
