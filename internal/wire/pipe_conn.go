package wire

import (
	"bufio"
	"context"
	"errors"
	"net"
	"time"
)

// The life of the pipe's connection: dialed in the background once callers
// are many, put in use once a PING is answered, ended when it breaks (its
// calls resent through the batch workers) or when the Wire stops.

// broke ends c after its reader stopped: the batch workers take over the
// queue, every call c holds is resent through go-redis, and the pipe
// redials.
func (p *pipe) broke(b *batcher, c *pconn) {
	c.close()
	c.mu.Lock()
	held := make([]*Call, 0, len(c.inflight)-c.head)
	for _, f := range c.inflight[c.head:] {
		held = append(held, f.cl)
	}
	c.inflight, c.head = nil, 0
	c.mu.Unlock()
	p.cur.CompareAndSwap(c, nil)
	b.pipeChanged()
	for _, cl := range held {
		requeue(cl, true)
	}
	if len(held) > 0 {
		b.handBack(held)
	}
	p.redial(b)
}

// close marks c closed and closes its connection: a write on it fails and
// its reader stops.
func (c *pconn) close() {
	c.mu.Lock()
	was := c.closed
	c.closed = true
	wake := c.waiting
	c.waiting = false
	c.mu.Unlock()
	if wake {
		c.more <- struct{}{}
	}
	if !was {
		// The net.Conn before go-redis's hold of it: go-redis may keep a
		// connection it finds healthy, and the reader must be interrupted.
		// And the transport under it (a TLS connection's TCP connection)
		// before the net.Conn itself: TLS's Close, when no write is in
		// flight, first sends close_notify under a write deadline of its
		// own (five seconds: no deadline set here would shorten it), and
		// with the send buffer full (a Redis that stopped reading) it
		// waits all of it, on the writer (the calls queued for the pipe
		// behind it, the connection still in use), on the reader (the
		// calls it holds not yet resent) or in Stop (Client.Close past its
		// close timeout). Its transport closed, close_notify fails at
		// once; Redis needs none (a command cut short is not run). A
		// Dialer's connection that hides a TLS one (no NetConn) may still
		// wait.
		_ = transport(c.nc).Close()
		_ = c.nc.Close()
		_ = c.rc.Close()
	}
}

// transport returns the connection under nc (a TLS connection's TCP
// connection), found by NetConn as crypto/tls names it, or nc itself.
func transport(nc net.Conn) net.Conn {
	// A few layers at most: a NetConn that returned its own connection
	// must not loop (and a net.Conn need not be comparable).
	for range 4 {
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		under := u.NetConn()
		if under == nil {
			break
		}
		nc = under
	}
	return nc
}

// redial dials the pipe's connection in the background and puts it in use
// once a PING on it is answered: at most one dial a second, so a Redis that
// refuses costs the callers nothing (the batch workers carry their calls).
func (p *pipe) redial(b *batcher) {
	if p.stopped.Load() {
		return
	}
	if !p.dials.allow() {
		return
	}
	b.w.Detach(func(ctx context.Context) {
		rc := p.rdb.Conn()
		err := rc.Ping(ctx).Err()
		if errors.Is(err, net.ErrClosed) {
			// go-redis took back the connection of the pconn that broke
			// (pconn.close) and, when it cannot check it (a TLS or custom
			// Dialer's net.Conn), handed it out again: it is dropped now,
			// and the next one is dialed.
			_ = rc.Close()
			rc = p.rdb.Conn()
			err = rc.Ping(ctx).Err()
		}
		if err != nil {
			_ = rc.Close()
			return
		}
		nc := p.dialed.Load()
		if nc == nil {
			_ = rc.Close()
			return
		}
		c := &pconn{rc: rc, nc: *nc, br: bufio.NewReaderSize(*nc, 32<<10), more: make(chan struct{}, 1)}
		_ = c.nc.SetDeadline(time.Time{})
		c.raw = rawSocket(c.nc)
		c.rawWrite = c.writeOnce
		if p.stopped.Load() || !p.cur.CompareAndSwap(nil, c) {
			_ = rc.Close()
			return
		}
		// Like the batch workers, the reader lives until Stop (or the
		// connection's end), uncounted: Close waits for the Wire's
		// background work before it stops the Wire.
		go p.readLoop(b, c)
		p.conns.Add(1)
		b.pipeChanged()
		if p.stopped.Load() {
			// Stop ran between the check and the store: it may have
			// missed c.
			c.close()
		}
	})
}

// stop closes the pipe's connection; the writer returns as the batcher
// stops.
func (p *pipe) stop() {
	p.stopped.Store(true)
	if c := p.cur.Load(); c != nil {
		c.close()
	}
	_ = p.rdb.Close()
	p.poke()
}

// poke wakes the writer. A token already waiting wakes it as well: the
// writer looks at the queue and the batcher's state each time it wakes.
func (p *pipe) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}
