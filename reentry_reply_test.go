package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// replyTamper is a go-redis hook that lets the next script call match
// accepts run in Redis, then loses its reply (an error in its place, as
// when every retry of go-redis failed after the first write reached Redis)
// or, with delay, hands it over late.
type replyTamper struct {
	armed atomic.Bool
	delay time.Duration
	match func(args []any) bool
	hits  atomic.Int32
}

func (h *replyTamper) tamper(cmd redis.Cmder) {
	if cmd.Err() != nil || (cmd.Name() != "evalsha" && cmd.Name() != "eval") || !h.match(cmd.Args()) || !h.armed.CompareAndSwap(true, false) {
		return
	}
	h.hits.Add(1)
	if h.delay > 0 {
		time.Sleep(h.delay)
		return
	}
	cmd.SetErr(errors.New("injected: the connection dropped after the command ran"))
}

func (h *replyTamper) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *replyTamper) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil {
			return err
		}
		h.tamper(cmd)
		return cmd.Err()
	}
}
func (h *replyTamper) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.tamper(c)
		}
		return err
	}
}

// isWriteReentry matches rwlock.lua's call for a writer that already holds
// (3 + 5 keys, then owner, field, ttl, count, wait ms, fence TTL; count > 0).
func isWriteReentry(args []any) bool {
	return len(args) == 14 && fmt.Sprint(args[11]) != "0" && fmt.Sprint(args[12]) == "0"
}

// tamperedClient is a Client whose every call goes through a go-redis
// client with h as a hook.
func tamperedClient(t *testing.T, h *replyTamper, opts ...Option) *Client {
	rdb := rdbFor(t, shared)
	rdb.AddHook(h)
	return newClientOn(t, rdb, append([]Option{WithOwnConnection(false)}, opts...)...)
}

// A re-entry whose reply is lost after it ran answers an error, so nobody
// unlocks the count Redis added: it is counted back down in the background,
// and the final Unlock frees the lock. Before, the final Unlock found a
// count left, answered nil and the watchdog renewed the lock until Close.
func TestLostReentryReplyIsUndone(t *testing.T) {
	ctx := ctxT(t)
	h := &replyTamper{match: isWriteReentry}
	c := tamperedClient(t, h, WithWatchdogTimeout(300*time.Millisecond))
	const name = "reentry:lost-reply"
	rw := c.RWMutex(name)
	wctx, err := rw.WriteContext(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	if err := rw.Lock(wctx); err == nil || h.hits.Load() != 1 {
		t.Fatalf("re-entry with its reply lost: %v (%d replies lost), want an error", err, h.hits.Load())
	}
	if err := rw.Unlock(wctx); err != nil {
		t.Fatalf("the final Unlock: %v", err)
	}
	rdb := rdbFor(t, shared)
	waitFor(t, "the lock freed", func() bool { return rdb.Exists(ctx, name).Val() == 0 })
	if ok, err := newClient(t, shared).RWMutex(name).TryLock(ctx, time.Second, time.Second); !ok || err != nil {
		t.Errorf("another Client could not take the write side after the final Unlock: %v, %v", ok, err)
	}
}

// A re-entry whose reply comes after the hold's lease ended answers the
// loss: Redis counted it while the hold lasted, which vouches for nothing
// after. A downgrade's context (ReadContext under the write hold) does not
// end with the write hold, so only the reply's timing can tell.
func TestLateReentryReplyAfterLossIsALoss(t *testing.T) {
	ctx := ctxT(t)
	h := &replyTamper{match: isWriteReentry, delay: 450 * time.Millisecond}
	c := tamperedClient(t, h)
	const name = "reentry:late-reply"
	rw := c.RWMutex(name)
	wctx, err := rw.WriteContext(ctx, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	rctx, err := rw.ReadContext(wctx, 0, 5*time.Second) // a downgrade
	if err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	if err := rw.Lock(rctx); !errors.Is(err, ErrLockLost) || h.hits.Load() != 1 {
		t.Errorf("write re-entry answered after its lease ended: %v (%d late replies), want ErrLockLost", err, h.hits.Load())
	}
	_ = rw.RUnlock(rctx)
}

// isWriteUnlockOf2 matches rwunlock.lua's call for a writer holding two
// counts (3 + 5 keys, then field, count, all, side, token, fence TTL).
func isWriteUnlockOf2(args []any) bool {
	return len(args) == 14 && fmt.Sprint(args[9]) == "2" && fmt.Sprint(args[11]) == "w"
}

// A non-final Unlock whose reply is lost after it ran leaves the count
// unknown; a re-entry sent with the count the caller knew was taken for a
// resend of an earlier one and not counted, so the lock ended one Unlock
// early while its holder counted a hold. The lost release is resent in the
// background before any other count-changing call, settling the count.
func TestLostReleaseReplyThenReentryKeepsTheCount(t *testing.T) {
	ctx := ctxT(t)
	h := &replyTamper{match: isWriteUnlockOf2}
	c := tamperedClient(t, h)
	other := newClient(t, shared)
	const name = "reentry:lost-release"
	rw := c.RWMutex(name)
	wctx, err := rw.WriteContext(ctx, 0, 0) // 1
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.Lock(wctx); err != nil { // 2
		t.Fatal(err)
	}
	h.armed.Store(true)
	if err := rw.Unlock(wctx); err == nil || h.hits.Load() != 1 { // 1, its reply lost
		t.Fatalf("Unlock with its reply lost: %v (%d lost), want an error", err, h.hits.Load())
	}
	if err := rw.Lock(wctx); err != nil { // 2
		t.Fatal(err)
	}
	if err := rw.Unlock(wctx); err != nil { // 1
		t.Fatal(err)
	}
	if ok, _ := other.RWMutex(name).TryLock(ctx, 0, 0); ok {
		t.Errorf("another Client took the write side while its holder still counts a hold")
	}
	if err := rw.Unlock(wctx); err != nil { // 0
		t.Fatalf("the final Unlock: %v", err)
	}
	if ok, err := other.RWMutex(name).TryLock(ctx, time.Second, time.Second); !ok || err != nil {
		t.Errorf("another Client could not take the write side after the final Unlock: %v, %v", ok, err)
	}
}
