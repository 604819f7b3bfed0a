package dlock

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// batcher sends the lock, unlock and renewal calls of one Client's
// goroutines, coalescing those that are waiting into one pipelined round
// trip: Redis then reads, runs and answers many calls per read and write,
// which is most of what a lock call costs it. A lone call is sent at once
// (an idle worker takes it); calls that arrive while workers are busy wait
// for the next free worker and go out together. No call waits for a timer.
//
// A caller waits for its call's reply or its ctx, whichever comes first
// (ctx is law); a call whose caller left is still completed, and its
// abandoned handler runs once the reply is in, to undo what it may have
// done. An acquire attempt whose caller left before it was sent is not sent
// at all.
type batcher struct {
	rdb redis.UniversalClient
	// abandoned undoes or finishes a call whose caller left, once its
	// reply is in. It runs on a goroutine of its own.
	abandoned func(cl *call)

	mu      sync.Mutex
	queue   []*call
	idle    int // workers waiting for a call
	stopped bool
	wake    chan struct{} // one token per worker to wake
	// pending counts calls submitted and not yet delivered, or whose
	// abandoned handler has not returned; drained is closed when it drops
	// to zero while someone waits for that (Close).
	pending int
	drained chan struct{}
}

// batchWorkers is how many round trips one Client has in flight at most.
// Two let the client prepare and read one batch while Redis runs the other,
// and keep batches deep: on two cores more only makes them shallower.
const batchWorkers = 2

// Call states.
const (
	callQueued int32 = iota
	callSent
	callAnswered
	callAbandoned
)

// call is one command on its way through the batcher.
type call struct {
	cmd    redis.Cmder
	script *script // when cmd is an EVALSHA of it: resent as EVAL after NOSCRIPT
	// op says what the call is, for the batcher's abandoned handler; h, q,
	// count and all are what that handler needs to undo or finish it.
	op       callOp
	h        *hold
	q        queueing
	count    int
	all      bool
	final    bool          // a release that ends the hold
	renewing bool          // a final release of a hold that was being renewed
	observe  func(Release) // a release's observers

	state atomic.Int32
	done  chan struct{} // receives once the reply is in, unless abandoned
}

// callOp is what a call does, for the handler of an abandoned call.
type callOp uint8

const (
	opPlain   callOp = iota // nothing to undo
	opAttempt               // an attempt at a new hold: droppable while unsent
	opReenter               // a re-entry's count up
	opRelease               // a count down or final release
)

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// newCall returns a call for cmd from the pool.
func newCall(cmd redis.Cmder, s *script) *call {
	cl := callPool.Get().(*call)
	cl.cmd, cl.script = cmd, s
	cl.state.Store(callQueued)
	return cl
}

// free returns an answered call to the pool. An abandoned call is never
// freed: its handler may still use it.
func (cl *call) free() {
	*cl = call{done: cl.done}
	callPool.Put(cl)
}

func newBatcher(rdb redis.UniversalClient, abandoned func(*call)) *batcher {
	b := &batcher{rdb: rdb, abandoned: abandoned, wake: make(chan struct{}, batchWorkers)}
	for range batchWorkers {
		go b.work()
	}
	return b
}

// do sends cl and waits for its reply or for ctx. It reports left (with
// ctx's cause) when ctx ended first: cl then belongs to the batcher, which
// completes it and runs its abandoned handler. Otherwise the reply is in
// cl.cmd and the caller frees cl once it has read it.
func (b *batcher) do(ctx context.Context, cl *call) (left bool, err error) {
	if cl.op == opAttempt && ctx.Err() != nil {
		cl.free() // never sent: nothing to undo
		return true, context.Cause(ctx)
	}
	// Any other call is sent even when ctx is already done (a release must
	// be), and its handler finishes it.
	b.submit(cl)
	done := ctx.Done()
	if done == nil {
		<-cl.done
		return false, nil
	}
	select {
	case <-cl.done:
		return false, nil
	case <-done:
		for {
			s := cl.state.Load()
			if s == callAnswered {
				<-cl.done // on its way
				return false, nil
			}
			if cl.state.CompareAndSwap(s, callAbandoned) {
				return true, context.Cause(ctx)
			}
		}
	}
}

func (b *batcher) submit(cl *call) {
	b.mu.Lock()
	b.pending++
	if b.stopped {
		b.mu.Unlock()
		// After Close: sent on a goroutine of its own, so that a cleanup
		// that outlived Close's budget still reaches Redis.
		go b.exec([]*call{cl})
		return
	}
	b.queue = append(b.queue, cl)
	wake := b.idle > 0
	if wake {
		b.idle--
	}
	b.mu.Unlock()
	if wake {
		b.wake <- struct{}{}
	}
}

func (b *batcher) work() {
	var batch []*call
	for {
		b.mu.Lock()
		for len(b.queue) == 0 {
			if b.stopped {
				b.mu.Unlock()
				return
			}
			b.idle++
			b.mu.Unlock()
			<-b.wake
			b.mu.Lock()
		}
		batch, b.queue = b.queue, batch[:0]
		b.mu.Unlock()
		b.exec(batch)
		clear(batch)
		// Let the callers just answered run first: most send their next
		// call at once, and it joins the next batch instead of leaving
		// alone. A lone caller loses nothing: the worker runs again as
		// soon as the caller waits.
		runtime.Gosched()
	}
}

// exec sends batch in one round trip (a lone call as itself, more as one
// pipeline) and delivers the replies.
func (b *batcher) exec(batch []*call) {
	ctx := context.Background()
	n := 0
	for _, cl := range batch {
		if !cl.state.CompareAndSwap(callQueued, callSent) && cl.op == opAttempt {
			// The caller left before it was sent: nothing to send or undo.
			b.delivered(1)
			continue
		}
		batch[n] = cl
		n++
	}
	batch = batch[:n]
	switch n {
	case 0:
		return
	case 1:
		_ = b.rdb.Process(ctx, batch[0].cmd)
	default:
		pipe := b.rdb.Pipeline()
		for _, cl := range batch {
			_ = pipe.Process(ctx, cl.cmd)
		}
		_, _ = pipe.Exec(ctx)
	}
	for _, cl := range batch {
		if cl.script != nil && isNoScript(cl.cmd.Err()) {
			cl.script.evalInstead(ctx, b.rdb, cl.cmd)
		}
	}
	answered := 0
	for _, cl := range batch {
		if cl.state.CompareAndSwap(callSent, callAnswered) {
			cl.done <- struct{}{}
			answered++
			continue
		}
		if cl.op == opPlain {
			answered++
			continue
		}
		go func() {
			defer b.delivered(1)
			b.abandoned(cl)
		}()
	}
	b.delivered(answered)
}

// delivered counts n calls done with.
func (b *batcher) delivered(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.pending -= n
	if b.pending == 0 && b.drained != nil {
		close(b.drained)
		b.drained = nil
	}
	b.mu.Unlock()
}

// drain returns a channel closed once no call is pending.
func (b *batcher) drain() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == 0 {
		return closedCh
	}
	if b.drained == nil {
		b.drained = make(chan struct{})
	}
	return b.drained
}

// stop ends the workers once the queue is empty; calls submitted afterwards
// are sent on goroutines of their own.
func (b *batcher) stop() {
	b.mu.Lock()
	b.stopped = true
	idle := b.idle
	b.idle = 0
	b.mu.Unlock()
	for range idle {
		b.wake <- struct{}{}
	}
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }
