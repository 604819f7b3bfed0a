package wire

import (
	"bufio"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipe carries the calls of many concurrent callers on one connection of
// the Wire's own, continuously: its writer writes whatever calls are queued
// as soon as it can, without waiting for the replies of what it wrote, and
// its reader reads replies as they come and hands each to its caller, in
// the order the calls were written (Redis answers a connection's commands
// in order). Redis's socket then rarely runs dry while callers wait, where
// the batch workers kept at most two round trips in flight and left Redis
// and the client taking turns (issue 31: sixteen goroutines kept only 1.4
// of two cores busy).
//
// The calls of few callers go lone (lone.go) and the pipe takes the rest
// once its connection is ready; until then, and whenever it is not (a
// broken connection being redialed), the batch workers send them through
// go-redis as before. Only a plain *redis.Client with WithOwnConnection
// gets a pipe, as it gets lone connections, and only calls whose command
// the pipe's codec writes and reads (resp.go's pipeable) use it.
//
// A caller that finds the writer waiting writes the queue itself
// (combine), without blocking, on a plain TCP or Unix connection.
//
// ctx is law as for every call: a caller waits in Wire.wait. A reply that
// does not come within the read timeout (go-redis's, one minute when
// disabled) after its call was written ends the connection; every call
// written on it and not answered is then resent through go-redis, and its
// caller, or its Undo, gets that reply (every call sent through Do is safe
// to resend).
type pipe struct {
	rdb     *redis.Client // one connection, dialed and initialised (AUTH, SELECT) by go-redis
	dialed  atomic.Pointer[net.Conn]
	cur     atomic.Pointer[pconn] // the connection in use; nil: none ready
	dials   dialGate
	stopped atomic.Bool
	wake    chan struct{} // the writer's wake-up; one token at most
	// writes and calls count the pipe's writes and the calls they
	// carried; conns the connections it put in use; rests the callers'
	// writes that left the writer a rest.
	writes, calls, conns, rests atomic.Int64
	// readTimeout and writeTimeout bound how long a written call waits for
	// its reply, and a write for the socket.
	readTimeout, writeTimeout time.Duration
	// rest is what a caller's write (combine) left unwritten, for the
	// writer to write before anything else, on restConn. Guarded by the
	// batcher's mu.
	rest     []byte
	restConn *pconn
}

// pconn is one connection of a pipe: each redial makes a new one.
type pconn struct {
	rc  *redis.Conn // go-redis's hold of the connection, closed with it
	nc  net.Conn
	br  *bufio.Reader // the reader's
	buf []byte        // the writer's
	// raw is the socket of a plain TCP or Unix connection, which a caller
	// writes without blocking (combine); nil for any other (TLS, a
	// custom Dialer's), whose calls only the writer writes. rawWrite is
	// writeOnce, made once; wn and werr are its progress and error.
	raw      syscall.RawConn
	rawWrite func(fd uintptr) bool // the platform's (pipe_raw_*.go)
	wn       int
	werr     error

	mu sync.Mutex
	// inflight are the calls written and not yet answered, oldest first
	// from head, with the time each was written.
	inflight []written
	head     int
	// unanswered counts the calls written and not yet answered, read
	// without mu (callerWrites).
	unanswered atomic.Int32
	closed     bool          // no call is written on it any more
	more       chan struct{} // wakes the reader waiting for a call to be written
	waiting    bool          // the reader waits on more
}

type written struct {
	cl *Call
	at time.Time
}

// newPipe returns the pipe of rdb, or nil when rdb gets none.
func newPipe(rdb redis.UniversalClient) *pipe {
	c := ownable(rdb)
	if c == nil {
		return nil
	}
	p := &pipe{wake: make(chan struct{}, 1)}
	p.rdb = ownClient(c, func(cn net.Conn) { p.dialed.Store(&cn) })
	opt := p.rdb.Options()
	p.readTimeout, p.writeTimeout = opt.ReadTimeout, opt.WriteTimeout
	return p
}

// writeLoop is the pipe's writer: it takes the batcher's queue whenever
// the pipe is in use and writes it. It returns once the batcher stops.
func (p *pipe) writeLoop(b *batcher) {
	var batch []*Call
	for {
		b.mu.Lock()
		for (len(b.queue) == 0 && p.rest == nil) || !b.w.Piping() || b.combining {
			if b.stopped {
				// The workers may have left with calls queued for the pipe
				// (they saw it in use): they go out on goroutines of their
				// own, as calls made after Stop do. A combiner hands over
				// what is queued once it is done (combine).
				var left []*Call
				if !b.combining && len(b.queue) > 0 {
					left, b.queue = b.queue, nil
				}
				b.mu.Unlock()
				if left != nil {
					go b.exec(left)
				}
				return
			}
			b.pipeIdle = true
			b.mu.Unlock()
			<-p.wake
			// Let the callers the reader just handed replies to queue
			// their next calls first, so that they share this write: a
			// write() on loopback runs Redis's side of the socket too, and
			// a write per call or two (64 goroutines sending PINGs: 2.5
			// calls per write without this, 23 with it) halved the calls
			// per second (2-vCPU AMD EPYC, PING 55-93 µs).
			runtime.Gosched()
			b.mu.Lock()
		}
		rest, rc := p.rest, p.restConn
		p.rest, p.restConn = nil, nil
		batch, b.queue = b.queue, batch[:0]
		b.mu.Unlock()
		if rest != nil {
			p.writeRest(rc, rest)
		}
		if len(batch) > 0 {
			p.write(b, batch, false)
		}
		clear(batch)
	}
}

// combine writes batch, the queue a caller took while the writer waited
// (batcher.enqueue), on the caller's goroutine, sparing the call the
// writer's wake-up: sixteen goroutines made 18% more Lock+Unlock pairs per
// second (54k to 63k in one interleaved run, 2-vCPU AMD EPYC, PING 51 µs),
// for 9% more Redis CPU per pair (a burst of calls now takes two writes,
// the first caller's and the writer's). The caller never blocks: what the
// socket does not take at once is left to the writer (ctx is law), which
// writes it before anything else. The caller serializes the other calls it
// takes too: their arguments are dlock's own, which marshal at once.
func (p *pipe) combine(b *batcher, batch []*Call) {
	rest, c := p.write(b, batch, true)
	clear(batch)
	b.mu.Lock()
	b.cbuf = batch[:0]
	b.combining = false
	if rest != nil {
		p.rest, p.restConn = rest, c
		p.rests.Add(1)
	}
	if b.stopped && len(b.queue) > 0 {
		// The writer may have returned meanwhile (it does not write while
		// a caller does): what was queued goes out as after Stop.
		left := b.queue
		b.queue = nil
		b.mu.Unlock()
		go b.exec(left)
		p.poke()
		return
	}
	if len(b.queue) == 0 && p.rest == nil {
		b.pipeIdle = true // the writer still waits
		b.mu.Unlock()
		return
	}
	b.pipeIdle = false
	b.mu.Unlock()
	p.poke()
}

// callerWrites reports whether a caller may write on the connection in
// use: only on a plain TCP or Unix socket, which it can write without
// blocking, and while fewer than combineBelow calls wait for replies.
func (p *pipe) callerWrites() bool {
	c := p.cur.Load()
	return c != nil && c.raw != nil && c.unanswered.Load() < combineBelow
}

// combineBelow bounds the calls waiting for their replies when a caller
// writes its own. Beyond it the pipe is deep enough that the writer's
// wake-up costs a call little, and the writes a caller's write adds cost
// Redis more: 64 goroutines with the bound made 92-94k pairs/s in two of
// three alternations (84k in the third) at 7.6-8.1 µs of Redis CPU per
// pair, without it 82-84k at 9.0-9.3 (rueidislock: 9.1-9.8; 2-vCPU AMD
// EPYC, PING 45-55 µs); 16 goroutines, whose calls in flight stay under
// it, are the same either way.
const combineBelow = 16

// writeRest writes what a caller's write left, on c, unless c is no longer
// in use (its calls are resent).
func (p *pipe) writeRest(c *pconn, rest []byte) {
	if p.cur.Load() != c {
		return
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(p.writeTimeout))
	if _, err := c.nc.Write(rest); err != nil {
		c.close()
	}
}

// write writes batch on the current connection. Calls the pipe cannot
// carry, and every call when no connection is in use, go through go-redis.
// With nb (a caller writes) it writes what the socket takes without
// blocking and returns the rest, with its connection.
func (p *pipe) write(b *batcher, batch []*Call, nb bool) ([]byte, *pconn) {
	c := p.cur.Load()
	var other []*Call
	n := 0
	if c != nil {
		c.buf = c.buf[:0]
	}
	for _, cl := range batch {
		if c == nil || !pipeable(cl.Cmd) {
			other = append(other, cl)
			continue
		}
		if !cl.state.CompareAndSwap(queued, sent) && cl.Droppable {
			b.delivered(1) // the caller left before it was sent
			continue
		}
		// Serialized before the calls are put in inflight: from then on
		// the reader may resend and answer them (the connection broke),
		// and their callers free them and reuse their arguments.
		mark := len(c.buf)
		var err error
		if c.buf, err = appendCommand(c.buf, cl.Cmd.Args()); err != nil {
			// An argument that cannot be marshalled: nothing of it is
			// written, and the call fails with the error, as go-redis
			// fails it. Not handed back to the batch workers: their
			// go-redis pipeline would fail with it every call it carried
			// beside this one (go-redis fails a whole pipeline when one
			// of its commands cannot be written).
			c.buf = c.buf[:mark]
			cl.Cmd.SetErr(err)
			b.finish([]*Call{cl})
			continue
		}
		batch[n] = cl
		n++
	}
	if len(other) > 0 {
		b.handBack(other)
	}
	if n == 0 {
		return nil, nil
	}
	batch = batch[:n]
	now := time.Now()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		// Broken since it was loaded: nothing was written.
		for _, cl := range batch {
			requeue(cl, false)
		}
		b.handBack(append([]*Call(nil), batch...))
		return nil, nil
	}
	for _, cl := range batch {
		c.inflight = append(c.inflight, written{cl, now})
	}
	c.unanswered.Add(int32(len(batch)))
	wake := c.waiting
	c.waiting = false
	c.mu.Unlock()
	if wake {
		c.more <- struct{}{}
	}
	p.writes.Add(1)
	p.calls.Add(int64(len(batch)))
	var rest []byte
	if nb {
		rest = c.writeNow()
	} else {
		_ = c.nc.SetWriteDeadline(now.Add(p.writeTimeout))
		if _, err := c.nc.Write(c.buf); err != nil {
			// The reader finds the connection closed and resends what it
			// holds, these calls too.
			c.close()
		}
	}
	if cap(c.buf) > 64<<10 {
		c.buf = nil // a burst's buffer is not kept
	}
	return rest, c
}

// writeNow writes c.buf as far as the socket takes it without waiting,
// and returns what is left (a copy), or nil.
func (c *pconn) writeNow() []byte {
	if c.raw == nil {
		// Redialed since callerWrites looked, to a connection a caller
		// may not write (a custom Dialer's may differ from dial to dial).
		return append([]byte(nil), c.buf...)
	}
	c.wn, c.werr = 0, nil
	err := c.raw.Write(c.rawWrite)
	switch {
	case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		c.close()
		return nil
	case c.werr != nil:
		c.close()
		return nil
	case c.wn < len(c.buf):
		return append([]byte(nil), c.buf[c.wn:]...)
	}
	return nil
}

// readLoop is the reader of c: it reads replies and hands them to their
// calls until c breaks, then resends the calls c still holds.
func (p *pipe) readLoop(b *batcher, c *pconn) {
	var deadline time.Time
	done := 0 // calls handed over since the batcher was last told
	for {
		c.mu.Lock()
		for c.head == len(c.inflight) && !c.closed {
			c.waiting = true
			c.mu.Unlock()
			b.delivered(done)
			done = 0
			<-c.more
			c.mu.Lock()
		}
		if c.closed {
			c.mu.Unlock()
			break
		}
		// The oldest call waits at most the read timeout. Moving the
		// deadline costs a timer update: it moves once the oldest call's
		// own is a sixteenth of the timeout later.
		due := c.inflight[c.head].at.Add(p.readTimeout)
		c.mu.Unlock()
		if due.Sub(deadline) > p.readTimeout/16 {
			deadline = due
			_ = c.nc.SetReadDeadline(deadline)
		}
		v, err := readReply(c.br)
		if err != nil {
			break
		}
		c.mu.Lock()
		cl := c.inflight[c.head].cl
		c.inflight[c.head] = written{}
		c.head++
		c.unanswered.Add(-1)
		switch {
		case c.head == len(c.inflight):
			c.inflight, c.head = c.inflight[:0], 0
		case c.head >= 1024 && 2*c.head >= len(c.inflight):
			// Under steady load the list is never empty: what is left
			// moves to the front, so that it does not grow for ever.
			n := copy(c.inflight, c.inflight[c.head:])
			clear(c.inflight[n:])
			c.inflight, c.head = c.inflight[:n], 0
		}
		c.mu.Unlock()
		done += p.answer(b, cl, v)
		if c.br.Buffered() == 0 {
			b.delivered(done)
			done = 0
		}
	}
	b.delivered(done)
	p.broke(b, c)
}

// answer puts reply v into cl and hands cl over, and returns 1 when it is
// done with (0: its Undo, a resend or a script load runs on).
func (p *pipe) answer(b *batcher, cl *Call, v any) int {
	setReply(cl.Cmd, v)
	err := cl.Cmd.Err()
	if cl.Script != nil && isNoScript(err) || isRetryable(err) || isRedirect(err) {
		// It did not run. The batch workers send it again through
		// go-redis: Redis lacked the script (a first use, a restart), which
		// their resend loads, or was not ready (loading, a failover), which
		// go-redis retries with backoff, or sent it elsewhere, which the
		// workers' resends follow (redirect.go). Not run, it stays droppable: not
		// sent again if its caller left meanwhile.
		if cl.Script != nil && isNoScript(err) {
			// The reply stays: the workers answer it with an EVAL.
			cl.noScript = true
			cl.state.CompareAndSwap(sent, queued)
		} else {
			requeue(cl, false)
		}
		b.handBack([]*Call{cl})
		return 0
	}
	if deliver(cl) || cl.Undo == nil {
		return 1
	}
	go func() {
		defer b.delivered(1)
		b.w.runUndo(cl)
	}()
	return 0
}

// Piping reports whether the Wire's pipe has a connection in use: calls of
// many concurrent callers go on it.
func (w *Wire) Piping() bool { return w.pipe != nil && w.pipe.cur.Load() != nil }

// PipeStats returns how many writes the pipe made and how many calls they
// carried: their ratio is how many calls shared a write.
func (w *Wire) PipeStats() (writes, calls int64) {
	if w.pipe == nil {
		return 0, 0
	}
	return w.pipe.writes.Load(), w.pipe.calls.Load()
}

// PipeConns returns how many connections the pipe has put in use.
func (w *Wire) PipeConns() int64 {
	if w.pipe == nil {
		return 0
	}
	return w.pipe.conns.Load()
}
