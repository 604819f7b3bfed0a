// Package wire carries one Client's commands to Redis and back. It owns
// three things and knows nothing of locks:
//
//   - batching: a call that finds fewer than Lones others in flight goes
//     out on its caller's goroutine (lone.go); the calls of many goroutines
//     go out together, continuously on the Wire's own pipe (pipe.go) when
//     it has one, else as pipelined round trips through go-redis
//     (batcher.go);
//   - ctx is law: a caller waits for its call's reply or its ctx, whichever
//     comes first, and what the call may have done is undone in the
//     background, bounded by the cleanup timeout, by the Undo
//     the caller supplied with the call;
//   - scripts: Lua run by SHA1, loaded by EVAL when the server lacks them
//     (script.go).
//
// Both ways of calling, Do (a command through the batcher) and Go (any
// function of go-redis calls), share one state machine: a call is queued,
// sent, then answered or abandoned, and exactly one of its caller and its
// Undo sees the reply.
package wire

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Wire sends the commands of one Client. Its methods are safe for
// concurrent use.
type Wire struct {
	rdb     redis.UniversalClient
	cleanup time.Duration
	variant Variant // the scripts' variant this Wire runs (SetVariant)
	batch   batcher // every call, or a Cluster's before its slot map is known
	nodes   *nodes  // a Cluster's batcher per master (nodes.go); nil otherwise
	lones   []*lone // nil: every call goes through a batcher
	pipe    *pipe   // nil: calls of many callers go through batch workers
	// replicaReads: the client sends read-only commands to replicas
	// (ReadsReplicas).
	replicaReads bool
	// background counts detached work and abandoned handlers, for Close.
	background tasks
}

// New returns a Wire over rdb whose background work is bounded by cleanup;
// with own, a caller among few sends its call on a connection of the Wire's
// own (lone.go) where rdb allows.
func New(rdb redis.UniversalClient, cleanup time.Duration, own bool) *Wire {
	w := &Wire{rdb: rdb, cleanup: cleanup}
	if own {
		w.lones = newLones(rdb)
		w.pipe = newPipe(rdb)
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		w.nodes = &nodes{cc: cc}
		o := cc.Options()
		w.replicaReads = o.ReadOnly || o.RouteByLatency || o.RouteRandomly
	}
	w.batch.start(w)
	return w
}

// ReadsReplicas reports whether w's client may send a bare read (HEXISTS,
// GET) to a replica: a Cluster client with ReadOnly, RouteByLatency or
// RouteRandomly. A read a lock decision rests on must then go in a script,
// which the primary answers. Safe for concurrent use.
func (w *Wire) ReadsReplicas() bool { return w.replicaReads }

// SetVariant makes w run every script's variant v (Script.For) in place of
// the script. Call it before the first call.
func (w *Wire) SetVariant(v Variant) { w.variant = v }

// Redis returns the go-redis client the Wire sends through.
func (w *Wire) Redis() redis.UniversalClient { return w.rdb }

// Call states.
const (
	queued int32 = iota
	sent
	answered
	abandoned
)

// Call is one command (or one Go function) on its way. A Call is used by
// one caller at a time; the Wire owns it from Do until Do returns.
type Call struct {
	Cmd    redis.Cmder
	Script *Script // when Cmd is an EVALSHA of it: resent as EVAL after NOSCRIPT
	// Droppable calls are not sent at all when their caller leaves before
	// they are: an attempt that never reached Redis did nothing to undo.
	Droppable bool
	// Undo, when not nil, runs once the reply is in if the caller left
	// first, on a goroutine counted for Close, with a context bounded by the
	// cleanup timeout. It undoes or finishes what the call did.
	Undo Undoer

	state atomic.Int32
	done  chan struct{} // receives once the reply is in, unless abandoned
	// intCmd is the command of a call made by Script.IntCall: it comes
	// from the pool with the Call, and goes back with it at Free.
	intCmd redis.IntCmd
	// noScript marks a call the pipe handed back with Redis's NOSCRIPT
	// reply in its command: the batch workers load the script with it
	// (evalInstead) without sending the EVALSHA again.
	noScript bool
}

// Undoer undoes or finishes a call whose caller left, given the call's
// command with its reply in. It is data the caller supplies with the call:
// the wire knows nothing of what a call means.
type Undoer interface {
	Undo(ctx context.Context, cmd redis.Cmder)
}

// UndoFunc is a function as an Undoer.
type UndoFunc func(ctx context.Context, cmd redis.Cmder)

// Undo calls f.
func (f UndoFunc) Undo(ctx context.Context, cmd redis.Cmder) { f(ctx, cmd) }

var callPool = sync.Pool{New: func() any { return &Call{done: make(chan struct{}, 1)} }}

// NewCall returns a call for cmd from the pool; s is the script cmd runs,
// or nil.
func NewCall(cmd redis.Cmder, s *Script) *Call {
	return callPool.Get().(*Call).init(cmd, s)
}

func (cl *Call) init(cmd redis.Cmder, s *Script) *Call {
	expectReply(cmd)
	cl.Cmd, cl.Script = cmd, s
	cl.state.Store(queued)
	return cl
}

// Free returns an answered call to the pool, with its command if
// Script.IntCall made it: read the reply before. Never call it on an
// abandoned call: its handler owns it.
func (cl *Call) Free() {
	*cl = Call{done: cl.done}
	callPool.Put(cl)
}

// Do sends cl and waits for its reply or for ctx. It reports left (with
// ctx's cause) when ctx ended first: cl then belongs to the Wire, which
// completes it and runs its Undo. Otherwise the reply is in
// cl.Cmd and the caller frees cl once it has read it. A call that is not
// Droppable is sent even when ctx is already done.
func (w *Wire) Do(ctx context.Context, cl *Call) (left bool, err error) {
	if cl.Droppable && ctx.Err() != nil {
		cl.Free()
		return true, context.Cause(ctx)
	}
	if w.variant != (Variant{}) && cl.Script != nil && cl.Script.variant != nil {
		// The same arguments, the other script: the EVALSHA's SHA1 is its
		// second argument.
		cl.Script = cl.Script.For(w.variant)
		cl.Cmd.Args()[1] = cl.Script.sha
	}
	if w.lones != nil {
		if ok, left, err := w.tryLone(ctx, cl); ok {
			return left, err
		}
	}
	b := &w.batch
	if w.nodes != nil {
		b = w.nodes.batcherFor(w, cl)
	}
	b.submit(cl)
	return w.wait(ctx, cl)
}

// wait is ctx is law, for both kinds of call.
func (w *Wire) wait(ctx context.Context, cl *Call) (left bool, err error) {
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
			if s == answered {
				<-cl.done // on its way
				return false, nil
			}
			if cl.state.CompareAndSwap(s, abandoned) {
				return true, context.Cause(ctx)
			}
		}
	}
}

// deliver hands cl's reply to its caller, and reports false when the caller
// left (the caller of deliver then runs its Undo).
func deliver(cl *Call) bool {
	if cl.state.CompareAndSwap(sent, answered) {
		cl.done <- struct{}{}
		return true
	}
	return false
}

// requeue makes cl, taken back from the connection it went out on (a lone
// one, the pipe), ready for the batch workers' exec: queued again unless
// its caller left, and not droppable when it may have run.
func requeue(cl *Call, mayHaveRun bool) {
	if mayHaveRun {
		cl.Droppable = false
	}
	cl.state.CompareAndSwap(sent, queued)
	cl.Cmd.SetErr(nil)
	expectReply(cl.Cmd)
}

// runUndo runs cl's Undo, if any, bounded by the cleanup timeout.
func (w *Wire) runUndo(cl *Call) {
	if cl.Undo == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cleanup)
	defer cancel()
	cl.Undo.Undo(ctx, cl.Cmd)
}

// Go runs fn, which makes go-redis calls of its own, and returns its result,
// or returns at once with ctx's cause (left true) when ctx is done first,
// whatever Redis does: fn then goes on in the background and, once it
// returns, abandoned (if not nil) undoes what it may have done. go-redis
// honours a context's deadline only with ContextTimeoutEnabled, so without
// this a call to a Redis that accepts and never answers would keep the
// caller for its read timeout times its retries.
func Go[T any](w *Wire, ctx context.Context, fn func(context.Context) (T, error), abandonedFn func(context.Context, T, error)) (T, bool, error) {
	var zero T
	if ctx.Done() == nil {
		v, err := fn(ctx)
		return v, false, err
	}
	if ctx.Err() != nil {
		return zero, true, context.Cause(ctx)
	}
	var v T
	var err error
	cl := &Call{done: make(chan struct{}, 1)}
	cl.state.Store(sent)
	if abandonedFn != nil {
		cl.Undo = UndoFunc(func(ctx context.Context, _ redis.Cmder) { abandonedFn(ctx, v, err) })
	}
	w.background.add()
	go func() {
		defer w.background.done()
		v, err = fn(context.WithoutCancel(ctx))
		if !deliver(cl) {
			w.runUndo(cl)
		}
	}()
	if left, cause := w.wait(ctx, cl); left {
		return zero, true, cause
	}
	return v, false, err
}

// Detach runs f on a goroutine of its own with a context that ends after
// the cleanup timeout, counted for Close. It is how work that must outlive
// its caller's ctx (a release, leaving a queue) is done.
func (w *Wire) Detach(f func(ctx context.Context)) {
	w.background.add()
	go func() {
		defer w.background.done()
		ctx, cancel := context.WithTimeout(context.Background(), w.cleanup)
		defer cancel()
		f(ctx)
	}()
}

// Idle returns a channel closed once no detached work is running.
func (w *Wire) Idle() <-chan struct{} { return w.background.idle() }

// Drain returns a channel closed once no call sent through Do is pending:
// every reply delivered and every Undo returned.
func (w *Wire) Drain() <-chan struct{} {
	if w.nodes == nil {
		return w.batch.drain()
	}
	bs := append(w.nodes.all(), &w.batch)
	drained := make(chan struct{})
	go func() {
		for _, b := range bs {
			<-b.drain()
		}
		close(drained)
	}()
	return drained
}

// Stop ends the batch workers once their queue is empty; calls made
// afterwards are sent on goroutines of their own, so that a cleanup that
// outlives Close's budget still reaches Redis.
func (w *Wire) Stop() {
	w.batch.stop()
	if w.nodes != nil {
		w.nodes.stop()
	}
	for _, l := range w.lones {
		// An inline call on it fails and is resent on a goroutine of its
		// own, as every call after Stop is.
		_ = l.rdb.Close()
		l.forget()
	}
}

// ClosedCh is a closed channel.
var ClosedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// tasks counts work running in the background. Unlike a sync.WaitGroup,
// work may start while Close waits for the count to reach zero (a hold lost
// during Close starts its cleanup then).
type tasks struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n returns to zero
}

func (g *tasks) add() {
	g.mu.Lock()
	if g.n == 0 {
		g.zero = make(chan struct{})
	}
	g.n++
	g.mu.Unlock()
}

func (g *tasks) done() {
	g.mu.Lock()
	g.n--
	if g.n == 0 {
		close(g.zero)
	}
	g.mu.Unlock()
}

func (g *tasks) idle() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		return ClosedCh
	}
	return g.zero
}
