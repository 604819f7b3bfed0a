package testenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxyDialTimeout bounds the proxy's dial to its target for each accepted
// connection.
const proxyDialTimeout = 2 * time.Second

// proxyRelistenTimeout bounds how long Heal keeps trying to listen on the
// proxy's port again after Refuse.
const proxyRelistenTimeout = 5 * time.Second

// proxyQueue is how many chunks one direction of one connection holds
// between reading and delivering; when it is full the proxy stops reading
// and TCP flow control pushes back on the sender.
const proxyQueue = 256

// FaultProxy is a TCP proxy on a free loopback port in front of one target
// (a Redis), for injecting network faults into the connections of one
// client while other clients talk to the target directly or through
// proxies of their own. Point a client at Addr.
//
// Faults can be switched at any time and apply to connections already open
// as well as to new ones:
//
//   - SetLatency delays each direction separately: every chunk of bytes is
//     delivered no earlier than the latency after the proxy read it, in
//     order (pipelined traffic does not add up delays).
//   - Blackhole is a partition: connections are still accepted and bytes
//     are still read from both sides, but nothing is delivered; the bytes
//     wait (as TCP retransmission would deliver them) until Heal, and
//     connections stay open. A client sees its calls hang.
//   - BlackholeOpen is a blackhole of the connections open now only, until
//     Heal: connections opened later flow. A client sees its open
//     connections go silent (a half-open connection: a peer that vanished
//     without FIN or RST) while a redial works.
//   - Reset sends RST on every open connection, to the client and to the
//     target (SO_LINGER 0, then close).
//   - Refuse closes the listener: new connections are refused (ECONNREFUSED)
//     while open ones carry on.
//   - Heal ends every fault: latency 0, no blackhole (held bytes are
//     delivered), and the listener back on the same port.
//
// A connection the proxy cannot relay because the target refuses it is
// reset. All methods are safe for concurrent use.
type FaultProxy struct {
	target string
	addr   string

	toServer atomic.Int64 // latency client -> target, in ns
	toClient atomic.Int64 // latency target -> client, in ns
	accepted atomic.Int64

	mu     sync.Mutex
	ln     net.Listener // nil while refusing or closed
	conns  map[*proxyConn]struct{}
	flow   chan struct{} // closed while bytes flow; open while blackholed
	hold   chan struct{} // closed while held connections flow; open from BlackholeOpen to Heal
	closed bool
	wg     sync.WaitGroup
}

// proxyConn is one relayed connection.
type proxyConn struct {
	p              *FaultProxy
	client, server *net.TCPConn
	done           chan struct{} // closed by teardown
	once           sync.Once
	halves         atomic.Int32 // directions that ended cleanly
	held           bool         // guarded by p.mu: BlackholeOpen holds its bytes at p.hold
}

// closedGate is a closed channel: the hold of a connection that
// BlackholeOpen did not hold.
var closedGate = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

type chunk struct {
	b  []byte
	at time.Time
}

// StartFaultProxy starts a proxy for target ("host:port") on a free port of
// 127.0.0.1 with no fault set. The caller must call Close. Safe for
// concurrent use.
func StartFaultProxy(target string) (*FaultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testenv: fault proxy listen: %w", err)
	}
	p := &FaultProxy{
		target: target,
		addr:   ln.Addr().String(),
		ln:     ln,
		conns:  make(map[*proxyConn]struct{}),
		flow:   make(chan struct{}),
		hold:   make(chan struct{}),
	}
	close(p.flow)
	close(p.hold)
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// NewFaultProxy starts a proxy for target like StartFaultProxy and closes
// it in t.Cleanup; an error is fatal. Call it from the test's goroutine.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	p, err := StartFaultProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("testenv: close fault proxy: %v", err)
		}
	})
	return p
}

// Addr returns the proxy's "127.0.0.1:PORT"; it never changes, not even
// across Refuse and Heal.
func (p *FaultProxy) Addr() string { return p.addr }

// Target returns the address the proxy relays to.
func (p *FaultProxy) Target() string { return p.target }

// Accepted returns how many connections the proxy has accepted so far.
func (p *FaultProxy) Accepted() int { return int(p.accepted.Load()) }

// Conns returns how many connections are open through the proxy.
func (p *FaultProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// SetLatency delays bytes going to the server (toServer) and to the client
// (toClient) from now on; 0 means none. Negative values count as 0.
func (p *FaultProxy) SetLatency(toServer, toClient time.Duration) {
	p.toServer.Store(int64(max(toServer, 0)))
	p.toClient.Store(int64(max(toClient, 0)))
}

// Latency returns the latencies set by SetLatency.
func (p *FaultProxy) Latency() (toServer, toClient time.Duration) {
	return time.Duration(p.toServer.Load()), time.Duration(p.toClient.Load())
}

// Blackhole stops delivering bytes in both directions, on open and new
// connections, until Heal. Connections stay open.
func (p *FaultProxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flow:
		p.flow = make(chan struct{})
	default: // already blackholed
	}
}

// BlackholeOpen stops delivering bytes in both directions on the
// connections open now, until Heal; connections accepted later flow (unless
// Blackhole is set too). Connections stay open.
func (p *FaultProxy) BlackholeOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.hold:
		p.hold = make(chan struct{})
	default: // already holding: the connections open now join the hold
	}
	for c := range p.conns {
		c.held = true
	}
}

// Blackholed reports whether the proxy is blackholed.
func (p *FaultProxy) Blackholed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flow:
		return false
	default:
		return true
	}
}

// Reset sends RST to both ends of every open connection and forgets them,
// returning how many there were. New connections are accepted as before.
func (p *FaultProxy) Reset() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.teardown(true)
	}
	return len(conns)
}

// Refuse closes the listener, so that connecting to Addr fails with
// "connection refused" until Heal. Open connections are not touched (add
// Reset for a server that went away). Refusing twice is a no-op.
func (p *FaultProxy) Refuse() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return net.ErrClosed
	}
	if p.ln == nil {
		return nil
	}
	err := p.ln.Close()
	p.ln = nil
	return err
}

// Heal ends every fault: no latency, bytes flow again (those held by
// Blackhole or BlackholeOpen are delivered now), and after Refuse the listener is back on
// the same address. It fails only if the port cannot be listened on again
// within a few seconds (another program took it meanwhile) or the proxy is
// closed.
func (p *FaultProxy) Heal() error {
	p.SetLatency(0, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return net.ErrClosed
	}
	select {
	case <-p.flow:
	default:
		close(p.flow)
	}
	select {
	case <-p.hold:
	default:
		close(p.hold)
	}
	if p.ln != nil {
		return nil
	}
	deadline := time.Now().Add(proxyRelistenTimeout)
	for {
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.ln = ln
			p.wg.Add(1)
			go p.accept(ln)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: fault proxy listen again on %s: %w", p.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops the proxy: the listener is closed, open connections are
// reset, and Close returns once every goroutine of the proxy has ended.
// Idempotent.
func (p *FaultProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	var err error
	if p.ln != nil {
		err = p.ln.Close()
		p.ln = nil
	}
	select {
	case <-p.flow:
	default:
		close(p.flow)
	}
	p.mu.Unlock()
	p.Reset()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *FaultProxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return // closed by Refuse or Close
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.relay(conn.(*net.TCPConn))
	}
}

// relay connects to the target for an accepted client connection and starts
// the four pumps.
func (p *FaultProxy) relay(client *net.TCPConn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: proxyDialTimeout}
	sc, err := d.Dial("tcp", p.target)
	if err != nil {
		_ = client.SetLinger(0)
		_ = client.Close()
		return
	}
	c := &proxyConn{p: p, client: client, server: sc.(*net.TCPConn), done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.teardown(true)
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	up := make(chan chunk, proxyQueue)
	down := make(chan chunk, proxyQueue)
	p.wg.Add(4)
	go c.read(c.client, up)
	go c.write(c.server, up, &p.toServer)
	go c.read(c.server, down)
	go c.write(c.client, down, &p.toClient)
}

// read moves bytes from src to ch, stamped with the time they were read.
// At EOF it closes ch so that the writer half-closes its side once the
// queued bytes are delivered; on any other error it tears down.
func (c *proxyConn) read(src *net.TCPConn, ch chan<- chunk) {
	defer c.p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			b := append([]byte(nil), buf[:n]...)
			select {
			case ch <- chunk{b: b, at: time.Now()}:
			case <-c.done:
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				close(ch)
			} else {
				c.teardown(true) // reset by a peer, or closed by us
			}
			return
		}
	}
}

// write delivers chunks from ch to dst, each no earlier than its read time
// plus the current latency and only while the proxy is not blackholed.
func (c *proxyConn) write(dst *net.TCPConn, ch <-chan chunk, latency *atomic.Int64) {
	defer c.p.wg.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var ck chunk
		var ok bool
		select {
		case ck, ok = <-ch:
		case <-c.done:
			return
		}
		if !ok {
			// The source closed cleanly: pass the FIN on, and close the
			// connection once both directions are over.
			_ = dst.CloseWrite()
			if c.halves.Add(1) == 2 {
				c.teardown(false)
			}
			return
		}
		for {
			wait := time.Until(ck.at.Add(time.Duration(latency.Load())))
			if wait <= 0 {
				break
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-c.done:
				return
			}
		}
		c.p.mu.Lock()
		flow, hold := c.p.flow, closedGate
		if c.held {
			hold = c.p.hold
		}
		c.p.mu.Unlock()
		for _, gate := range []chan struct{}{flow, hold} {
			select {
			case <-gate:
			case <-c.done:
				return
			}
		}
		if _, err := dst.Write(ck.b); err != nil {
			c.teardown(true)
			return
		}
	}
}

// teardown closes both sides once, with RST when rst is set.
func (c *proxyConn) teardown(rst bool) {
	c.once.Do(func() {
		close(c.done)
		if rst {
			_ = c.client.SetLinger(0)
			_ = c.server.SetLinger(0)
		}
		_ = c.client.Close()
		_ = c.server.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// SilentServer accepts TCP connections on a free loopback port and never
// answers: it reads and discards whatever it is sent and keeps every
// connection open until Close. A client pointed at it sees every call hang,
// for tests that a caller's context bounds every call. All methods are
// safe for concurrent use.
type SilentServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartSilentServer starts a SilentServer. The caller must call Close.
func StartSilentServer() (*SilentServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testenv: silent server listen: %w", err)
	}
	s := &SilentServer{ln: ln, conns: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// NewSilentServer starts a SilentServer and closes it in t.Cleanup; an
// error is fatal. Call it from the test's goroutine.
func NewSilentServer(t testing.TB) *SilentServer {
	t.Helper()
	s, err := StartSilentServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Addr returns the server's "127.0.0.1:PORT".
func (s *SilentServer) Addr() string { return s.ln.Addr().String() }

// Close closes the listener and every connection and waits for the
// server's goroutines. Idempotent.
func (s *SilentServer) Close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *SilentServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}()
	}
}
