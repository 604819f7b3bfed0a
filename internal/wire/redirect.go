package wire

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Cluster answers a command for a slot it does not serve with a redirect:
// MOVED, ASK, TRYAGAIN (a multi-key command during a migration) or
// CLUSTERDOWN (a slot without an owner for a moment). Each says the command
// did not run. go-redis follows a few redirects and then returns the last
// one as the command's error; during a reshard nodes disagree for a moment
// on a slot's owner and send it back and forth, so that a lock call would
// fail (or a renewal declare a hold lost, or a release leave a hold nobody
// owns until its TTL) for a slot that is only moving.
//
// So the wire sends a redirected call again, with a short backoff, until a
// node answers it with anything else: the caller keeps waiting within its
// ctx, and a caller that leaves has its call finished in the background
// (its Undo sees the settled reply), bounded by the cleanup timeout from
// then. A call that already ran once and lost its reply is safe to send
// again: every call sent through Do is (go-redis resends them too).

// isRedirect reports whether err is a Cluster's answer that the command did
// not run on that node and will run elsewhere or later.
func isRedirect(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") ||
		redis.IsTryAgainError(err) || redis.IsClusterDownError(err))
}

// Backoff between resends of redirected calls: from the first to the
// largest, doubling. go-redis reloads its slot map after a MOVED in the
// background, so the first resends find the new owner.
const (
	firstRedirectBackoff = 2 * time.Millisecond
	maxRedirectBackoff   = 100 * time.Millisecond
)

// resend sends calls, each redirected, again until each is answered with
// anything but a redirect, then finishes them. A call whose caller left is
// finished with its last redirect once the cleanup timeout has passed since
// the caller left was seen, and a droppable one at once.
func (b *batcher) resend(calls []*Call) {
	ctx := context.Background()
	backoff := firstRedirectBackoff
	left := make(map[*Call]time.Time)
	for len(calls) > 0 {
		time.Sleep(backoff)
		backoff = min(2*backoff, maxRedirectBackoff)
		// A droppable call whose caller left is not sent again: its last
		// send did not run (a redirect says so), and it must not run once
		// its caller stopped waiting (a renewal of a hold its holder was
		// told it lost). It is finished with its redirect.
		var dropped []*Call
		sendAgain := calls[:0]
		for _, cl := range calls {
			if cl.Droppable && cl.state.Load() == abandoned {
				dropped = append(dropped, cl)
			} else {
				sendAgain = append(sendAgain, cl)
			}
		}
		calls = sendAgain
		b.finish(dropped)
		if len(calls) == 0 {
			return
		}
		for _, cl := range calls {
			cl.Cmd.SetErr(nil)
			expectReply(cl.Cmd)
		}
		if len(calls) == 1 {
			_ = b.w.rdb.Process(ctx, calls[0].Cmd)
		} else {
			pipe := b.w.rdb.Pipeline()
			for _, cl := range calls {
				_ = pipe.Process(ctx, cl.Cmd)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				failUnanswered(calls, err)
			}
		}
		var settled []*Call
		keep := calls[:0]
		now := time.Now()
		for _, cl := range calls {
			if cl.Script != nil && isNoScript(cl.Cmd.Err()) {
				cl.Script.evalInstead(ctx, b.w.rdb, cl.Cmd)
			}
			requireReply(cl.Cmd)
			if isRedirect(cl.Cmd.Err()) && !b.givenUp(cl, left, now) {
				keep = append(keep, cl)
				continue
			}
			settled = append(settled, cl)
		}
		calls = keep
		b.finish(settled)
	}
}

// givenUp reports whether the wire stops resending cl: its caller left
// (seen first at the time recorded in left) longer than the cleanup
// timeout ago.
func (b *batcher) givenUp(cl *Call, left map[*Call]time.Time, now time.Time) bool {
	if cl.state.Load() != abandoned {
		return false
	}
	since, ok := left[cl]
	if !ok {
		left[cl] = now
		return false
	}
	return now.Sub(since) > b.w.cleanup
}
