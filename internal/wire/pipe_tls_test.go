package wire

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// tlsFront is a TLS front for a Redis (as a TLS proxy, or Redis's own
// TLS, would be) whose connections can be stalled: it stops reading what
// the client sends on them, as a blackholed peer does, so that the
// client's send buffer fills. Connections accepted later flow.
type tlsFront struct {
	ln     net.Listener
	target string
	cfg    *tls.Config
	done   chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
	open  []frontConn
}

type frontConn struct {
	tcp     *net.TCPConn
	stalled *atomic.Bool
}

// startTLSFront starts a front for target with a certificate of its own,
// and returns it with a client config that trusts it. Closed in cleanup.
func startTLSFront(t *testing.T, target string) (*tlsFront, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "dlock wire test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFront{
		ln:     ln,
		target: target,
		cfg:    &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		done:   make(chan struct{}),
	}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
}

func (f *tlsFront) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		tc := tls.Server(c, f.cfg)
		stalled := new(atomic.Bool)
		f.mu.Lock()
		f.conns = append(f.conns, tc, s)
		f.open = append(f.open, frontConn{c.(*net.TCPConn), stalled})
		f.mu.Unlock()
		f.wg.Add(2)
		go func() {
			defer f.wg.Done()
			_, _ = io.Copy(tc, s)
		}()
		go func() {
			defer f.wg.Done()
			buf := make([]byte, 32<<10)
			for {
				if stalled.Load() {
					<-f.done
					return
				}
				n, err := tc.Read(buf)
				if _, werr := s.Write(buf[:n]); err != nil || werr != nil {
					return
				}
			}
		}()
	}
}

// stallOpen stops reading from the clients of the connections open now,
// and shrinks their receive buffers, so that they fill soon.
func (f *tlsFront) stallOpen() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.open {
		_ = c.tcp.SetReadBuffer(16 << 10)
		c.stalled.Store(true)
	}
}

func (f *tlsFront) close() {
	_ = f.ln.Close()
	close(f.done)
	f.mu.Lock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// tlsClient returns a go-redis client of Redis behind f, over TLS that a
// custom Dialer sets up.
func tlsClient(t *testing.T, f *tlsFront, cfg *tls.Config, opt redis.Options) *redis.Client {
	opt.Addr = f.ln.Addr().String()
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, err
		}
		return tc, nil
	}
	rdb := redis.NewClient(&opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// The pipe's write on a TLS connection that a blackholed Redis no longer
// reads times out, and the connection is closed. Closing a TLS connection
// sends close_notify first, with a deadline of its own (five seconds) that
// no deadline set before overrides, and with the send buffer full it would
// wait all of it: on the writer, with every call queued for the pipe
// behind it, the connection still in use (its reader not interrupted, the
// batch workers not taking over). A call made meanwhile must be answered
// through go-redis once the write times out, not five seconds later.
func TestPipeBreakOnAStalledTLSConnectionDoesNotHoldCalls(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	r := testenv.StartRedis(t)
	f, cfg := startTLSFront(t, r.Addr())
	rdb := tlsClient(t, f, cfg, redis.Options{ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	w := pipedWire(t, rdb)
	// The pipe's write gives up soon; go-redis's, which resends the big
	// call below once the pipe breaks, do not.
	w.pipe.writeTimeout = writeTimeout
	tc, ok := w.pipe.cur.Load().nc.(*tls.Conn)
	if !ok {
		t.Fatalf("the pipe's connection is a %T, not TLS", w.pipe.cur.Load().nc)
	}
	if w.pipe.cur.Load().raw != nil {
		t.Fatal("callers may write the TCP socket under the TLS connection: their bytes would bypass TLS")
	}
	_ = tc.NetConn().(*net.TCPConn).SetWriteBuffer(16 << 10) // it fills soon
	f.stallOpen()
	ctx := context.Background()
	// More than the send and receive buffers hold: the writer's write
	// waits until its deadline. Its caller does not wait.
	big := redis.NewCmd(ctx, "echo", strings.Repeat("x", 1<<20))
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := do(cctx, w, big); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a 1 MiB call on a stalled connection: %v, want the caller's deadline", err)
	}
	start := time.Now()
	if err := do(ctx, w, redis.NewCmd(ctx, "ping")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > writeTimeout+time.Second {
		t.Errorf("a call queued behind a write that timed out on a stalled TLS connection was answered after %v (write timeout %v)", d.Round(time.Millisecond), writeTimeout)
	}
}

// Stop (Client.Close, last) closes the pipe's connection. On a TLS
// connection to a blackholed Redis whose send buffer the pipe's writes
// filled, with no write in flight (Go's TLS skips close_notify under a
// write in flight), closing it would wait up to five seconds for room for
// close_notify: Close past its bound. Here the test fills the buffer
// itself under the TLS layer, as the pipe's last write may have left it.
func TestPipeStopOnAFullTLSConnectionReturnsAtOnce(t *testing.T) {
	r := testenv.StartRedis(t)
	f, cfg := startTLSFront(t, r.Addr())
	rdb := tlsClient(t, f, cfg, redis.Options{})
	w := pipedWire(t, rdb)
	tc, ok := w.pipe.cur.Load().nc.(*tls.Conn)
	if !ok {
		t.Fatalf("the pipe's connection is a %T, not TLS", w.pipe.cur.Load().nc)
	}
	f.stallOpen()
	raw := tc.NetConn()
	_ = raw.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	chunk := make([]byte, 64<<10)
	for {
		if _, err := raw.Write(chunk); err != nil {
			break
		}
	}
	_ = raw.SetWriteDeadline(time.Time{})
	start := time.Now()
	w.Stop()
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Stop took %v on a TLS connection whose send buffer is full", d.Round(time.Millisecond))
	}
}
