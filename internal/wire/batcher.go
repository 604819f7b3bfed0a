package wire

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// batcher sends the calls of one Client's goroutines, coalescing those that
// are waiting into one pipelined round trip: Redis then reads, runs and
// answers many calls per read and write, which is most of what a lock call
// costs it. A lone call is sent at once (an idle worker takes it); calls
// that arrive while workers are busy wait for the next free worker and go
// out together. No call waits for a timer.
type batcher struct {
	w *Wire

	mu      sync.Mutex
	queue   []*Call
	idle    int // workers waiting for a call
	stopped bool
	wake    chan struct{} // one token per worker to wake
	// pending counts calls submitted and not yet delivered, or whose
	// Undo has not returned; drained is closed when it drops
	// to zero while someone waits for that (Close).
	pending int
	drained chan struct{}
	// load is the mean of pending as calls arrive (an EWMA over about
	// eight calls, times loadUnit): how many callers are active. It keeps
	// lone sends to few callers: with many, a lull in pending as a batch's
	// replies go out would send a few alone and make the batches shallower,
	// which costs Redis more per call (sixteen goroutines: 8% fewer pairs
	// per second in one interleaved run, 2-vCPU Intel Xeon, PING 26 µs).
	load int
	// pipeIdle is set while the pipe's writer (pipe.go) waits to be woken.
	// While the pipe has a connection in use (Wire.Piping), its writer
	// takes the queue and enqueue wakes it instead of a worker.
	pipeIdle bool
	// combining is set while a caller writes the queue itself (pipe.go's
	// combine), taken into cbuf: the writer then waits.
	combining bool
	cbuf      []*Call
	// slow are calls the pipe handed back (resends, script loads,
	// commands it cannot carry): the workers take them even while the pipe
	// takes the queue, so that such calls use at most Workers connections
	// of the go-redis client however many come at once.
	slow []*Call
	// workers counts the worker goroutines running (they leave once
	// stopped and idle); retired marks a master's batcher stopped for being
	// idle (nodes.go), which a call routed to it starts again. Written
	// under mu; routing reads it without.
	workers int
	retired atomic.Bool
	// lastBatch is when a worker last sent a batch, Unix ns: how long the
	// batcher has been idle.
	lastBatch atomic.Int64
}

// Workers is how many round trips one Client has in flight at most. Two let
// the client prepare and read one batch while Redis runs the other, and
// keep batches deep: on two cores more only makes them shallower.
const Workers = 2

func (b *batcher) start(w *Wire) {
	b.w = w
	b.wake = make(chan struct{}, Workers)
	b.lastBatch.Store(time.Now().UnixNano())
	b.workers = Workers
	for range Workers {
		go b.work()
	}
	if w.pipe != nil {
		go w.pipe.writeLoop(b)
	}
}

// retire stops b's workers if it has been idle (no batch sent, nothing
// pending) since before idleSince. Only a Cluster master's batcher is
// retired (nodes.retireIdle); it has no pipe. A call that reaches it
// retired is still sent (enqueue's stopped path) and counted for Drain.
func (b *batcher) retire(idleSince time.Time) {
	b.mu.Lock()
	if b.stopped || b.pending > 0 || len(b.queue) > 0 || len(b.slow) > 0 || b.lastBatch.Load() > idleSince.UnixNano() {
		b.mu.Unlock()
		return
	}
	b.stopped = true
	b.retired.Store(true)
	idle := b.idle
	b.idle = 0
	b.mu.Unlock()
	for range idle {
		b.wake <- struct{}{}
	}
}

// revive starts a retired batcher's workers again, as many as have left.
// Called with the nodes' mu held, and not once they are stopped.
func (b *batcher) revive() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.retired.Load() {
		return
	}
	b.stopped = false
	b.retired.Store(false)
	b.lastBatch.Store(time.Now().UnixNano())
	for ; b.workers < Workers; b.workers++ {
		go b.work()
	}
}

// pipeChanged wakes whoever takes the queue now that the pipe's connection
// went into use (the writer) or out of it (the workers). Call it after each
// change of the connection: a writer or worker that went to wait having
// seen the old one waits under mu, which this takes.
func (b *batcher) pipeChanged() {
	b.mu.Lock()
	on := b.w.Piping()
	wakePipe := on && b.pipeIdle && len(b.queue) > 0
	if wakePipe {
		b.pipeIdle = false
	}
	wake := 0
	if !on {
		wake = min(b.idle, len(b.queue))
		b.idle -= wake
	}
	b.mu.Unlock()
	if wakePipe {
		b.w.pipe.poke()
	}
	for range wake {
		b.wake <- struct{}{}
	}
}

func (b *batcher) submit(cl *Call) { b.enqueue(cl, 1) }

// loadUnit is load's fixed-point unit.
const loadUnit = 16

// arrive updates load for a call that arrives now, once per call. Called
// with mu held.
func (b *batcher) arrive() {
	b.load += (b.pending*loadUnit - b.load) / 8
}

// reserve reports whether fewer than k calls are pending, and have been on
// average as calls arrived, and if so counts one that the caller sends
// itself (delivered when done, or enqueue).
func (b *batcher) reserve(k int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending >= k || b.load >= k*loadUnit || b.stopped {
		return false // enqueue counts its arrival
	}
	b.arrive()
	b.pending++
	return true
}

// enqueue queues a call, adding n to the calls pending (0 for one already
// counted by reserve).
func (b *batcher) enqueue(cl *Call, n int) {
	b.mu.Lock()
	if n > 0 {
		b.arrive()
	}
	b.pending += n
	if b.stopped {
		b.mu.Unlock()
		go b.exec([]*Call{cl})
		return
	}
	b.queue = append(b.queue, cl)
	if p := b.w.pipe; p != nil {
		if b.w.Piping() {
			if b.pipeIdle && !b.combining && p.rest == nil && p.callerWrites() {
				b.combining, b.pipeIdle = true, false
				batch := b.queue
				b.queue = b.cbuf
				b.mu.Unlock()
				p.combine(b, batch)
				return
			}
			wake := b.pipeIdle
			b.pipeIdle = false
			b.mu.Unlock()
			if wake {
				p.poke()
			}
			return
		}
		if b.pending > Lones {
			// Callers many enough to leave lone: the pipe is dialed for
			// them.
			defer p.redial(b)
		}
	}
	wake := b.takeIdle()
	b.mu.Unlock()
	if wake {
		b.wake <- struct{}{}
	}
}

// takeIdle reports whether a worker waits, and if so counts it woken: the
// caller then sends it a token once mu is released. Called with mu held.
func (b *batcher) takeIdle() bool {
	if b.idle == 0 {
		return false
	}
	b.idle--
	return true
}

// handBack gives the workers calls the pipe took and does not carry on,
// each queued again (requeue) unless its caller left.
func (b *batcher) handBack(calls []*Call) {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		go b.exec(calls)
		return
	}
	b.slow = append(b.slow, calls...)
	wake := b.takeIdle()
	b.mu.Unlock()
	if wake {
		b.wake <- struct{}{}
	}
}

func (b *batcher) work() {
	var batch []*Call
	for {
		b.mu.Lock()
		for len(b.slow) == 0 && (len(b.queue) == 0 || b.w.Piping()) {
			if b.stopped {
				b.workers--
				b.mu.Unlock()
				return
			}
			b.idle++
			b.mu.Unlock()
			<-b.wake
			b.mu.Lock()
		}
		if len(b.slow) > 0 {
			batch, b.slow = b.slow, batch[:0]
		} else {
			batch, b.queue = b.queue, batch[:0]
		}
		b.mu.Unlock()
		if b.w.nodes != nil {
			// Only a Cluster master's batcher is ever retired for idling.
			b.lastBatch.Store(time.Now().UnixNano())
		}
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
func (b *batcher) exec(batch []*Call) {
	ctx := context.Background()
	n := 0
	for _, cl := range batch {
		if !cl.state.CompareAndSwap(queued, sent) && cl.Droppable {
			b.delivered(1) // the caller left before it was sent
			continue
		}
		batch[n] = cl
		n++
	}
	batch = batch[:n]
	if n == 0 {
		return
	}
	send := batch
	for i, cl := range batch {
		if cl.noScript {
			// Answered NOSCRIPT on the pipe, which kept the reply: its EVAL
			// below needs no EVALSHA first.
			send = append([]*Call(nil), batch[:i]...)
			for _, cl := range batch[i+1:] {
				if !cl.noScript {
					send = append(send, cl)
				}
			}
			break
		}
	}
	switch len(send) {
	case 0:
	case 1:
		_ = b.w.rdb.Process(ctx, send[0].Cmd)
	default:
		pipe := b.w.rdb.Pipeline()
		for _, cl := range send {
			_ = pipe.Process(ctx, cl.Cmd)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			failUnanswered(send, err)
		}
	}
	var redirected []*Call
	answered := batch[:0]
	if b.w.nodes != nil {
		b.w.nodes.answered(batch[0].Cmd)
	}
	for _, cl := range batch {
		if cl.Script != nil && isNoScript(cl.Cmd.Err()) {
			cl.noScript = false
			cl.Script.evalInstead(ctx, b.w.rdb, cl.Cmd)
		}
		requireReply(cl.Cmd)
		if isRedirect(cl.Cmd.Err()) {
			redirected = append(redirected, cl)
		} else {
			answered = append(answered, cl)
		}
	}
	if len(redirected) > 0 {
		go b.resend(redirected)
	}
	b.finish(answered)
}

// finish hands each call of batch, its reply in, to its caller, or runs its
// Undo when the caller left.
func (b *batcher) finish(batch []*Call) {
	done := 0
	for _, cl := range batch {
		if deliver(cl) || cl.Undo == nil {
			done++
			continue
		}
		go func() {
			defer b.delivered(1)
			b.w.runUndo(cl)
		}()
	}
	b.delivered(done)
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

func (b *batcher) drain() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending == 0 {
		return ClosedCh
	}
	if b.drained == nil {
		b.drained = make(chan struct{})
	}
	return b.drained
}

func (b *batcher) stop() {
	b.mu.Lock()
	b.stopped = true
	idle := b.idle
	b.idle = 0
	b.mu.Unlock()
	for range idle {
		b.wake <- struct{}{}
	}
	if p := b.w.pipe; p != nil {
		p.stop()
	}
}
