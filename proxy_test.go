package dlock

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// blackhole is a TCP proxy to a Redis that can silently drop everything in
// both directions while keeping the connections open: the network view of
// a process cut off (a partition), which a killed process does not give.
type blackhole struct {
	ln     net.Listener
	target string
	drop   atomic.Bool
	// dropReplies drops only what Redis sends: calls run, replies are lost.
	dropReplies atomic.Bool
	wg          sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
	done  bool
}

// startBlackhole starts a proxy to target, closed when the test ends.
func startBlackhole(t testing.TB, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) Addr() string { return b.ln.Addr().String() }

// Cut starts dropping every byte; Heal forwards again.
func (b *blackhole) Cut()  { b.drop.Store(true) }
func (b *blackhole) Heal() { b.drop.Store(false); b.dropReplies.Store(false) }

// CutReplies starts dropping what Redis sends only; Heal ends it.
func (b *blackhole) CutReplies() { b.dropReplies.Store(true) }

func (b *blackhole) accept() {
	defer b.wg.Done()
	for {
		in, err := b.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", b.target)
		if err != nil {
			in.Close()
			continue
		}
		b.mu.Lock()
		if b.done {
			b.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		b.conns = append(b.conns, in, out)
		b.wg.Add(2)
		b.mu.Unlock()
		go b.pipe(in, out, &b.drop)
		go b.pipe(out, in, &b.dropReplies)
	}
}

func (b *blackhole) pipe(from, to net.Conn, dropThis *atomic.Bool) {
	defer b.wg.Done()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !b.drop.Load() && !dropThis.Load() {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (b *blackhole) close() {
	b.ln.Close()
	b.mu.Lock()
	b.done = true
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// clientVia returns a dlock Client whose Redis connections go through b,
// closed when the test ends (after b heals, so Close is quick).
func clientVia(t testing.TB, b *blackhole, opts ...Option) *Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:                     b.Addr(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Heal()
		_ = c.Close()
	})
	return c
}
