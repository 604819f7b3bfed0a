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
	// attempt builds one try at a new hold (count 0) or a re-entry (count >
	// 0), an EVALSHA of the script it returns; attemptReply reads its reply.
	attempt(h *hold, ttl time.Duration, count int, q queueing) (redis.Cmder, *script)
	attemptReply(cmd redis.Cmder, count int) (reply, error)
	// release builds the undoing of one hold of count, or of all of them;
	// releaseReply reads its reply.
	release(h *hold, count int, all bool) (redis.Cmder, *script)
	releaseReply(cmd redis.Cmder) (reply, error)
	// leave undoes what a waiter that gives up may have left behind: its
	// queue entry, a hand-off that reached it, a grant whose reply was lost.
	// It returns nil when there is nothing to undo.
	leave(ctx context.Context, h *hold, q queueing) *redis.Cmd
	// channel is the release channel its waiters listen on.
	channel(h *hold) string
	// shared reports whether holds of this kind share the lock (readers).
	shared() bool
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
// without allocating. An attempt answers {1, count, token} when held, {0,
// pttl} when another owner holds the lock, {-1} when the re-entered hold is
// gone and {-2} for an upgrade; a release answers {1, remaining count} or
// {0, why_gone code}.
type reply struct {
	n int
	v [3]int64
}

// String prints the reply's integers, as the script sent them.
func (r reply) String() string { return fmt.Sprint(r.v[:r.n]) }

// readReply reads a reply sent as an array of integers (the read-write
// lock scripts).
func readReply(c redis.Cmder) (reply, error) {
	var r reply
	cmd, ok := c.(*redis.Cmd)
	if !ok {
		return r, fmt.Errorf("dlock: unexpected %T", c)
	}
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

func (p mutexProtocol) attempt(h *hold, ttl time.Duration, count int, q queueing) (redis.Cmder, *script) {
	a := &h.c.arg
	if q.entry == "" && !p.fair {
		// The common call: four arguments, acquire.lua's first branch.
		return h.intCmd(scriptAcquire, h.keys[:3], h.fieldArg, ttlArg(h.c, ttl), count, a.fenceTTLMs), scriptAcquire
	}
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
	return h.intCmd(scriptAcquire, h.keys[:3], h.fieldArg, ttlArg(h.c, ttl), count, a.fenceTTLMs,
		entry, registered, a.queueTTLMs, fair, a.claimMs), scriptAcquire
}

// attemptReply reads acquire.lua's one integer into a reply.
func (mutexProtocol) attemptReply(cmd redis.Cmder, count int) (reply, error) {
	v, err := cmd.(*redis.IntCmd).Result()
	switch {
	case err != nil:
		return reply{}, err
	case v >= 0 && count == 0:
		return reply{n: 3, v: [3]int64{1, 1, v}}, nil
	case v > 0:
		return reply{n: 3, v: [3]int64{1, v, 0}}, nil
	case v == -1:
		return reply{n: 1, v: [3]int64{-1}}, nil
	case v <= -2:
		return reply{n: 2, v: [3]int64{0, -3 - v}}, nil
	}
	return reply{}, fmt.Errorf("dlock: unexpected acquire reply %d", v)
}

func (mutexProtocol) release(h *hold, count int, all bool) (redis.Cmder, *script) {
	a := &h.c.arg
	if all {
		return h.intCmd(scriptRelease, h.keys, h.fieldArg, count, a.claimMs, a.fenceTTLMs, h.token, "1"), scriptRelease
	}
	return h.intCmd(scriptRelease, h.keys, h.fieldArg, count, a.claimMs, a.fenceTTLMs, h.token), scriptRelease
}

// releaseReply reads release.lua's one integer into a reply.
func (mutexProtocol) releaseReply(cmd redis.Cmder) (reply, error) {
	v, err := cmd.(*redis.IntCmd).Result()
	switch {
	case err != nil:
		return reply{}, err
	case v >= 0:
		return reply{n: 2, v: [3]int64{1, v}}, nil
	}
	return reply{n: 2, v: [3]int64{0, -1 - v}}, nil
}

func (mutexProtocol) leave(ctx context.Context, h *hold, q queueing) *redis.Cmd {
	// Even without an entry: a grant whose reply was lost is this owner's,
	// and leave.lua passes it on.
	a := &h.c.arg
	return scriptLeave.run(ctx, h.c, h.keys[:3], q.entry, h.fieldArg, a.claimMs, a.fenceTTLMs)
}

func (mutexProtocol) channel(h *hold) string { return h.handle.channel() }
func (mutexProtocol) shared() bool           { return false }
func (mutexProtocol) renewKind() byte        { return 'm' }

// writeProtocol is an RWMutex's write side: Redisson's RReadWriteLock hash,
// waiting writers registered so that new readers hold back.
type writeProtocol struct{}

func (writeProtocol) kind() Kind { return KindWrite }

func (writeProtocol) attempt(h *hold, ttl time.Duration, count int, q queueing) (redis.Cmder, *script) {
	a := &h.c.arg
	var waitMs any = "0"
	if q.entry != "" {
		waitMs = a.writerWaitMs
	}
	return scriptRWLock.cmd(h.keys, h.ownerArg, h.fieldArg, ttlArg(h.c, ttl), count, waitMs, a.fenceTTLMs), scriptRWLock
}

func (writeProtocol) attemptReply(cmd redis.Cmder, _ int) (reply, error) { return readReply(cmd) }

func (writeProtocol) release(h *hold, count int, all bool) (redis.Cmder, *script) {
	return scriptRWUnlock.cmd(h.keys, h.fieldArg, count, flag(all), "w", h.token, h.c.arg.fenceTTLMs), scriptRWUnlock
}

func (writeProtocol) releaseReply(cmd redis.Cmder) (reply, error) { return readReply(cmd) }

func (writeProtocol) leave(ctx context.Context, h *hold, q queueing) *redis.Cmd {
	return scriptRWLeave.run(ctx, h.c, h.keys, h.ownerArg)
}

func (writeProtocol) channel(h *hold) string { return h.ks.RWChannel }
func (writeProtocol) shared() bool           { return false }
func (writeProtocol) renewKind() byte        { return 'w' }

// readProtocol is an RWMutex's read side: a field per reader in the same
// hash, and a deadline per reader by the server's clock.
type readProtocol struct{}

func (readProtocol) kind() Kind { return KindRead }

func (readProtocol) attempt(h *hold, ttl time.Duration, count int, _ queueing) (redis.Cmder, *script) {
	return scriptRLock.cmd(h.keys, h.fieldArg, h.writeFieldArg, ttlArg(h.c, ttl), count, h.c.arg.fenceTTLMs), scriptRLock
}

func (readProtocol) attemptReply(cmd redis.Cmder, _ int) (reply, error) { return readReply(cmd) }

func (readProtocol) release(h *hold, count int, all bool) (redis.Cmder, *script) {
	return scriptRWUnlock.cmd(h.keys, h.fieldArg, count, flag(all), "r", h.token, h.c.arg.fenceTTLMs), scriptRWUnlock
}

func (readProtocol) releaseReply(cmd redis.Cmder) (reply, error) { return readReply(cmd) }

func (readProtocol) leave(context.Context, *hold, queueing) *redis.Cmd { return nil }
func (readProtocol) channel(h *hold) string                            { return h.ks.RWChannel }
func (readProtocol) shared() bool                                      { return true }
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
