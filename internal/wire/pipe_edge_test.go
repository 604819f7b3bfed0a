package wire

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// gateArg is a command argument whose first MarshalBinary (the pipe
// writer's) signals entered and blocks until release is closed; later
// ones (go-redis's, on a resend) return at once.
type gateArg struct {
	first            atomic.Bool
	entered, release chan struct{}
}

func newGateArg() *gateArg {
	return &gateArg{entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gateArg) MarshalBinary() ([]byte, error) {
	if g.first.CompareAndSwap(false, true) {
		close(g.entered)
		<-g.release
	}
	return []byte("x"), nil
}

func queueLen(w *Wire) int {
	w.batch.mu.Lock()
	defer w.batch.mu.Unlock()
	return len(w.batch.queue)
}

// The pipe's writer must not read a call once another goroutine may have
// answered it: a call published in inflight before it was serialized is
// resent by the reader when the connection breaks, answered, and freed by
// its caller (Cmd nil, its args reused) while the writer still serializes it.
func TestPipeWriterDoesNotReadACallAnsweredMeanwhile(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	w := pipedWire(t, rdb)
	ctx := context.Background()

	// X holds the writer while A and B queue behind it.
	x := newGateArg()
	xDone := make(chan error, 1)
	go func() { xDone <- do(ctx, w, redis.NewCmd(ctx, "echo", x)) }()
	<-x.entered
	a := newGateArg()
	aDone := make(chan error, 1)
	go func() { aDone <- do(ctx, w, redis.NewCmd(ctx, "echo", a)) }()
	waitUntil(t, "A queued", func() bool { return queueLen(w) == 1 })
	bDone := make(chan error, 1)
	go func() { bDone <- do(ctx, w, redis.NewIntCmd(ctx, "incr", "pipe:review:b")) }()
	waitUntil(t, "B queued", func() bool { return queueLen(w) == 2 })
	close(x.release)
	if err := <-xDone; err != nil {
		t.Fatal(err)
	}
	<-a.entered // the writer took [A B] and serializes A
	// The connection breaks now.
	_ = w.pipe.cur.Load().nc.Close()
	select {
	case err := <-bDone: // B was resent, answered and freed
		bDone <- err
	case <-time.After(500 * time.Millisecond):
	}
	close(a.release)
	for _, ch := range []chan error{aDone, bDone} {
		select {
		case err := <-ch:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a call was not answered")
		}
	}
}

// The pipe writes every argument it accepts as go-redis would: a nil
// *string as "" (go-redis's writer does), a time.Time as RFC 3339 (go-redis
// checks for time.Time before encoding.BinaryMarshaler, which time.Time
// also implements). The writer must not panic, nor send other bytes.
func TestPipeWritesArgumentsAsGoRedis(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	w := pipedWire(t, rdb)
	ctx := context.Background()
	at := time.Date(2026, 11, 28, 3, 4, 5, 6, time.UTC)
	for _, arg := range []any{(*string)(nil), at, &at} {
		want := redis.NewCmd(ctx, "echo", arg)
		if err := rdb.Process(ctx, want); err != nil {
			t.Fatal(err)
		}
		got := redis.NewCmd(ctx, "echo", arg)
		if err := do(ctx, w, got); err != nil {
			t.Fatal(err)
		}
		if got.Err() != nil || got.Val() != want.Val() {
			t.Errorf("ECHO %#v: %q, %v through the wire; go-redis sends it as %q", arg, got.Val(), got.Err(), want.Val())
		}
	}
}

// A reply such as READONLY or LOADING says the command did not run: a
// droppable call so answered on the pipe after its caller left must not be
// sent again (a renewal must not extend a hold once its caller stopped
// waiting), as it would not be had it never been written.
func TestPipeRetryableReplyKeepsACallDroppable(t *testing.T) {
	r := testenv.StartRedis(t)
	direct := r.NewClient(t)
	ctx := context.Background()
	// A replica (of nothing): writes are answered READONLY.
	if err := direct.Do(ctx, "replicaof", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Do(context.Background(), "replicaof", "no", "one").Err() })
	proxy := testenv.NewFaultProxy(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	w := pipedWire(t, rdb)
	// The READONLY reaches the wire after its caller left.
	proxy.SetLatency(0, 300*time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	cl := NewCall(redis.NewIntCmd(ctx, "incr", "pipe:review:droppable"), nil)
	cl.Droppable = true
	if left, _ := w.Do(cctx, cl); !left {
		t.Fatal("the call was answered within 50 ms through 300 ms of latency")
	}
	// Redis takes writes again before the READONLY reaches the wire.
	if err := direct.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Drain():
	case <-time.After(10 * time.Second):
		t.Fatal("the call was never done with")
	}
	if n, err := direct.Get(ctx, "pipe:review:droppable").Result(); err != redis.Nil {
		t.Errorf("the droppable call whose caller left ran after its READONLY: %q, %v", n, err)
	}
}

// wrappedConn hides the TCP connection's syscall.Conn, as a tls.Conn or a
// custom Dialer's connection does: go-redis cannot check it for health.
type wrappedConn struct{ net.Conn }

// After its connection broke, the pipe's redial puts a new one in use,
// also over a Dialer whose connections go-redis cannot check: the one the
// broken pconn closed, which go-redis took back, is not PINGed again.
func TestPipeRedialsOverACustomDialer(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrappedConn{c}, nil
	}})
	t.Cleanup(func() { _ = rdb.Close() })
	w := pipedWire(t, rdb)
	// The connection breaks, and the next write finds it broken.
	_ = w.pipe.cur.Load().nc.Close()
	ctx := context.Background()
	if err := do(ctx, w, redis.NewCmd(ctx, "ping")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the broken connection dropped", func() bool { return !w.Piping() })
	time.Sleep(1100 * time.Millisecond) // past redial's rate limit
	w.pipe.redial(&w.batch)
	deadline := time.Now().Add(2 * time.Second)
	for !w.Piping() {
		if time.Now().After(deadline) {
			t.Fatal("the pipe's redial did not put a new connection in use")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// failingArg is a command argument whose MarshalBinary fails.
type failingArg struct{}

var errMarshal = errors.New("failingArg cannot be marshalled")

func (failingArg) MarshalBinary() ([]byte, error) { return nil, errMarshal }

// An argument whose MarshalBinary fails is not written as an empty string
// (a command other than the caller's): the call fails with the error, as
// go-redis fails any marshalling error, and the calls beside it on the
// pipe are written and answered.
func TestPipeHandsBackAnArgumentThatCannotBeMarshalled(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	w := pipedWire(t, rdb)
	ctx := context.Background()
	bad := redis.NewCmd(ctx, "echo", failingArg{})
	if err := do(ctx, w, bad); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(bad.Err(), errMarshal) {
		t.Fatalf("ECHO of an argument that cannot be marshalled: %q, %v; want the marshalling error", bad.Val(), bad.Err())
	}
	_, before := w.PipeStats()
	good := redis.NewIntCmd(ctx, "incr", "pipe:review:after-bad")
	if err := do(ctx, w, good); err != nil {
		t.Fatal(err)
	}
	if _, after := w.PipeStats(); good.Err() != nil || good.Val() != 1 || after != before+1 {
		t.Fatalf("the call after it: %d, %v; pipe calls %d -> %d", good.Val(), good.Err(), before, after)
	}
}

// A call whose argument cannot be marshalled, were it handed back to the
// batch workers, would go with the other calls handed back beside it (a
// command the pipe does not write, a call answered NOSCRIPT or LOADING on
// the pipe) in one go-redis pipeline, and go-redis fails a whole pipeline
// when one of its commands cannot be written: each of those calls would
// fail with an error of an argument not its own. Only the call whose
// argument it is gets the error.
func TestPipeFailsAnUnmarshallableCallAlone(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	w := pipedWire(t, rdb)
	ctx := context.Background()
	bad := NewCall(redis.NewCmd(ctx, "echo", failingArg{}), nil)
	good := NewCall(redis.NewStatusCmd(ctx, "set", "pipe:review:beside-bad", "v"), nil) // not pipeable
	w.batch.mu.Lock()
	w.batch.pending += 2 // as submit counts them
	w.batch.mu.Unlock()
	w.pipe.write(&w.batch, []*Call{bad, good}, false)
	for _, cl := range []*Call{bad, good} {
		if _, err := w.wait(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(bad.Cmd.Err(), errMarshal) {
		t.Fatalf("the unmarshallable call: %v, want the marshalling error", bad.Cmd.Err())
	}
	if err := good.Cmd.Err(); err != nil {
		t.Fatalf("the call handed back beside it: %v, want OK", err)
	}
}
