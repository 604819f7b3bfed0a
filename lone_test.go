package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
	"github.com/dlock-dev/dlock/internal/wire"
)

// callCounter counts the scripts a go-redis client sends, alone or in
// pipelines (not a new connection's HELLO and CLIENT SETINFO).
type callCounter struct{ alone, piped, pipelines atomic.Int64 }

func (h *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.alone.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
				n++
			}
		}
		if n > 0 {
			h.pipelines.Add(1)
			h.piped.Add(int64(n))
		}
		return next(ctx, cmds)
	}
}

// lockUnlock takes and releases name n times.
func lockUnlock(ctx context.Context, c *Client, name string, n int) error {
	for range n {
		m := c.Mutex(name)
		if err := m.Lock(ctx); err != nil {
			return err
		}
		if err := m.Unlock(ctx); err != nil {
			return err
		}
	}
	return nil
}

// A caller that finds no other call of its Client in flight sends its call
// itself, on the Client's own connection: the go-redis client it was given
// sees none of them. Many concurrent callers share the writes of the
// Client's pipe.
func TestLoneCallerSendsItsOwnCall(t *testing.T) {
	rdb := rdbFor(t, shared)
	var seen callCounter
	rdb.AddHook(&seen)
	c := newClientOn(t, rdb)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	// The first calls go through the batcher while the connection is dialed
	// in the background.
	waitFor(t, "the lone connection", func() bool {
		_ = lockUnlock(ctx, c, "lone:warm", 1)
		before := seen.alone.Load() + seen.piped.Load()
		_ = lockUnlock(ctx, c, "lone:warm", 1)
		return seen.alone.Load()+seen.piped.Load() == before
	})
	// The first grant subscribed the client channel in the background; its
	// confirmation renews the holds of that moment (a script that may go
	// through the go-redis client): not the lone caller's, so not counted.
	waitSubscribed(t, ctx, rdb, c)
	before := seen.alone.Load() + seen.piped.Load()
	if err := lockUnlock(ctx, c, "lone:seq", 200); err != nil {
		t.Fatal(err)
	}
	if n := seen.alone.Load() + seen.piped.Load() - before; n != 0 {
		t.Errorf("400 calls of a lone caller: %d went through the go-redis client, want 0", n)
	}

	// Many concurrent callers: their calls go lone while few are in
	// flight, through the batcher at first, and on the pipe, which is dialed
	// for them, once it is ready; on the pipe, calls share writes.
	const g, k = 16, 50
	waitFor(t, "the pipe", func() bool {
		concurrently(g, func(i int) {
			if err := lockUnlock(ctx, c, fmt.Sprintf("lone:par:%d", i), 2); err != nil {
				t.Error(err)
			}
		})
		return c.wire().Piping()
	})
	seen.alone.Store(0)
	seen.piped.Store(0)
	writes0, calls0 := c.wire().PipeStats()
	concurrently(g, func(i int) {
		if err := lockUnlock(ctx, c, fmt.Sprintf("lone:par:%d", i), k); err != nil {
			t.Error(err)
		}
	})
	writes, calls := c.wire().PipeStats()
	writes, calls = writes-writes0, calls-calls0
	if n := seen.alone.Load() + seen.piped.Load(); n > g*k*2/10 {
		t.Errorf("%d concurrent callers with the pipe ready: %d of %d calls went through the go-redis client", g, n, g*k*2)
	}
	if calls < g*k*2/2 {
		t.Errorf("%d concurrent callers: only %d of %d calls went on the pipe", g, calls, g*k*2)
	}
	// A caller that finds the writer waiting writes its call alone
	// (combine); the calls queued meanwhile share the writer's next write
	// (1.2-2.6 calls per write in runs on a 2-vCPU VM, with and without
	// -race): a write per call would make it 1.
	if writes == 0 || float64(calls)/float64(writes) < 1.05 {
		t.Errorf("%d concurrent callers: %d calls in %d writes of the pipe, want some to share a write", g, calls, writes)
	}
}

// WithOwnConnection(false): every call goes through the go-redis client,
// and its hooks see every one.
func TestWithoutOwnConnection(t *testing.T) {
	rdb := rdbFor(t, shared)
	var seen callCounter
	rdb.AddHook(&seen)
	c := newClientOn(t, rdb, WithOwnConnection(false))
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	if err := lockUnlock(ctx, c, "lone:off", 1); err != nil { // scripts loaded
		t.Fatal(err)
	}
	// The channel confirmed first: its confirmation renews the holds of
	// that moment, one more call beside the 200 counted (CI saw 201).
	c.e.Hub().Listen()
	<-c.e.Hub().ClientReady()
	seen.alone.Store(0)
	seen.piped.Store(0)
	if err := lockUnlock(ctx, c, "lone:off", 100); err != nil {
		t.Fatal(err)
	}
	if n := seen.alone.Load() + seen.piped.Load(); n != 200 || c.wire().LoneReady() {
		t.Fatalf("the go-redis client saw %d of 200 calls (lone ready: %v)", n, c.wire().LoneReady())
	}
	// Many concurrent callers too: no pipe, every call through the client.
	seen.alone.Store(0)
	seen.piped.Store(0)
	const g, k = 16, 20
	concurrently(g, func(i int) {
		if err := lockUnlock(ctx, c, fmt.Sprintf("lone:off:%d", i), k); err != nil {
			t.Error(err)
		}
	})
	if n := seen.alone.Load() + seen.piped.Load(); n != g*k*2 || c.wire().Piping() {
		t.Fatalf("%d concurrent callers: the go-redis client saw %d of %d calls (pipe in use: %v)", g, n, g*k*2, c.wire().Piping())
	}
}

// A reply that says the call did not run and may run later (READONLY, here
// from a replica) is not the lone call's answer: the call is resent through
// the go-redis client given to New, which retries such replies with backoff
// as it did before the lone connection existed.
func TestLoneReadOnlyGoesThroughTheClient(t *testing.T) {
	replica := testenv.StartReplica(t, testenv.StartRedis(t))
	rdb := rdbFor(t, replica)
	// The take's arguments carry the watchdog timeout, 7000 ms: a release
	// or cleanup (which the client may send too) does not.
	var takes atomic.Int64
	rdb.AddHook(scriptWatch(func(args []any) {
		if strings.Contains(fmt.Sprint(args...), " 7000 ") {
			takes.Add(1)
		}
	}))
	c := newClientOn(t, rdb, WithWatchdogTimeout(7*time.Second))
	ctx := ctxT(t)
	waitFor(t, "the lone connection", func() bool {
		_ = c.Mutex("lone:readonly").Lock(ctx) // READONLY
		return c.wire().LoneReady()
	})
	takes.Store(0)
	err := c.Mutex("lone:readonly").Lock(ctx)
	if err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Lock on a replica: %v, want READONLY", err)
	}
	if takes.Load() == 0 {
		t.Fatal("the READONLY reply on the lone connection was the take's answer; want the take resent through the go-redis client")
	}
}

// scriptWatch is a go-redis hook that shows f the arguments of every script
// call sent through the client, alone or in a pipeline (a resent call may
// share a round trip with a background cleanup).
type scriptWatch func(args []any)

func (f scriptWatch) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f scriptWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			f(cmd.Args())
		}
		return next(ctx, cmd)
	}
}
func (f scriptWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
				f(cmd.Args())
			}
		}
		return next(ctx, cmds)
	}
}

// ctx is law on the lone connection too: a lone caller whose Redis goes
// silent mid-call returns once its ctx ends (deadline or cancel), and the
// acquisition that happened (Redis ran the call; its reply was lost) is
// undone once Redis answers again, long before the lock's TTL.
func TestLoneCallerCtxIsLaw(t *testing.T) {
	for _, how := range []string{"deadline", "cancel"} {
		t.Run(how, func(t *testing.T) {
			b := startBlackhole(t, shared.Addr())
			c := clientVia(t, b)
			rdb := rdbFor(t, shared)
			ctx := ctxT(t)
			name := "lone:law:" + how
			waitFor(t, "the lone connection", func() bool {
				return lockUnlock(ctx, c, name, 1) == nil && c.wire().LoneReady()
			})
			const budget = 100 * time.Millisecond
			cctx, cancel := context.WithTimeout(ctx, budget)
			if how == "cancel" {
				// A call made with it first: the wire's interrupt is
				// registered on a ctx once, for all its calls.
				cctx, cancel = context.WithCancel(ctx)
				if err := lockUnlock(cctx, c, name+":first", 1); err != nil {
					t.Fatal(err)
				}
				time.AfterFunc(budget, cancel)
			}
			defer cancel()
			// The call runs; its reply is lost.
			b.CutReplies()
			start := time.Now()
			err := c.Mutex(name).Lock(cctx)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Fatalf("Lock on a silent Redis: %v, want the ctx's error", err)
			}
			// Slack for a loaded 2-core box; go-redis alone keeps a call
			// for its read timeout, 3 s.
			if took > budget+900*time.Millisecond {
				t.Errorf("Lock returned %v after its ctx's %v", took, budget)
			}
			b.Heal()
			// Whether the call ran or not, no hold of it remains: the
			// resend's reply goes to the Undo, which releases it.
			waitFor(t, "the abandoned acquisition undone", func() bool {
				return rdb.Exists(ctx, name).Val() == 0
			})
			if err := lockUnlock(ctx, c, name, 1); err != nil {
				t.Fatalf("after healing: %v", err)
			}
		})
	}
}

// cancelAfterWrite is a connection that, once armed, cancels a ctx right
// after it wrote a command naming mark, and lets the cancel's callbacks run
// before go-redis goes on to set its read deadline.
type cancelAfterWrite struct {
	net.Conn
	mark   []byte
	cancel *atomic.Pointer[context.CancelFunc]
}

func (c cancelAfterWrite) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if bytes.Contains(b, c.mark) {
		if f := c.cancel.Swap(nil); f != nil {
			(*f)()
			time.Sleep(50 * time.Millisecond)
		}
	}
	return n, err
}

// A cancel that lands between the lone call's write and its read still
// ends the call: the interrupt must survive the deadline go-redis sets
// before reading (its read timeout, a minute here, would otherwise keep
// the caller).
func TestLoneCallerCancelledMidWrite(t *testing.T) {
	b := startBlackhole(t, shared.Addr())
	const name = "lone:midwrite"
	var cancelNext atomic.Pointer[context.CancelFunc]
	var d net.Dialer
	// The read timeout (3 s) is far above the 1 s the cancelled Lock may
	// take, and bounds the resend's wait when the blackhole cut its reply
	// before Heal (the resend races the test's Heal): go-redis then sends
	// it again, healed, and the Undo runs.
	rdb := redis.NewClient(&redis.Options{
		Addr:                     b.Addr(),
		ReadTimeout:              3 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return cancelAfterWrite{cn, []byte(name + "}"), &cancelNext}, nil
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClientOn(t, rdb)
	t.Cleanup(b.Heal) // before Close
	ctx := ctxT(t)
	waitFor(t, "the lone connection", func() bool {
		return lockUnlock(ctx, c, "lone:midwrite:warm", 1) == nil && c.wire().LoneReady()
	})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cancelNext.Store(&cancel)
	b.CutReplies()
	start := time.Now()
	err := c.Mutex(name).Lock(cctx)
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cancelled during its write: %v, want context.Canceled", err)
	}
	// Slack for a loaded 2-core box, far below the read timeout.
	if took > time.Second {
		t.Errorf("Lock returned %v after its ctx was cancelled", took)
	}
	b.Heal()
	rdbDirect := rdbFor(t, shared)
	waitFor(t, "the abandoned acquisition undone", func() bool {
		return rdbDirect.Exists(ctx, name).Val() == 0
	})
	waitFor(t, "the lone connection again", func() bool {
		return lockUnlock(ctx, c, name, 1) == nil && c.wire().LoneReady()
	})
}

// A lone connection that Redis dropped fails the next lone call; the call
// is resent through the go-redis client and succeeds, and a new connection
// is dialed in the background.
func TestLoneConnectionLost(t *testing.T) {
	rdb := rdbFor(t, shared)
	c := newClientOn(t, rdb)
	ctx := ctxT(t)
	waitFor(t, "the lone connection", func() bool {
		return lockUnlock(ctx, c, "lone:lost", 1) == nil && c.wire().LoneReady()
	})
	// Every normal connection but the one this command comes on, the lone
	// one among them.
	if err := rdb.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	m := c.Mutex("lone:lost")
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock after the connection was dropped: %v", err)
	}
	if n, err := m.HoldCount(ctx); err != nil || n != 1 {
		t.Fatalf("HoldCount after the resent Lock: %v, %v; want 1", n, err)
	}
	mustUnlock(t, m)
	waitFor(t, "the lone connection again", func() bool {
		return lockUnlock(ctx, c, "lone:lost", 1) == nil && c.wire().LoneReady()
	})
	// SCRIPT FLUSH: a lone call finds NOSCRIPT and is resent with its
	// script.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lockUnlock(ctx, c, "lone:lost", 2); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %v", err)
	}
}

// concurrently runs f on g goroutines and waits for them.
func concurrently(g int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// warmLones makes calls from wire.Lones goroutines at once until every lone
// connection of c is ready (each is dialed only once the callers found the
// ones before it busy).
func warmLones(t *testing.T, ctx context.Context, c *Client) {
	t.Helper()
	waitFor(t, "every lone connection", func() bool {
		concurrently(wire.Lones, func(i int) { _ = lockUnlock(ctx, c, fmt.Sprintf("lone:warm:%d", i), 5) })
		return c.wire().LonesReady() == wire.Lones
	})
}

// A few concurrent callers (4, the scaling table's G=4, where batching two
// by two cost a third of the pairs per second) each send their calls
// themselves on a lone connection of their own: the go-redis client sees
// none of them, and no call waits for a batch worker. Many more callers, and
// calls go through the batcher again.
func TestFewCallersSendTheirOwn(t *testing.T) {
	const few = 4
	rdb := rdbFor(t, shared)
	var seen callCounter
	rdb.AddHook(&seen)
	c := newClientOn(t, rdb)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	warmLones(t, ctx, c)
	seen.alone.Store(0)
	seen.piped.Store(0)
	const k = 100
	concurrently(few, func(i int) {
		if err := lockUnlock(ctx, c, fmt.Sprintf("lone:few:%d", i), k); err != nil {
			t.Error(err)
		}
	})
	if n := seen.alone.Load() + seen.piped.Load(); n != 0 {
		t.Errorf("%d concurrent callers, %d calls: %d went through the go-redis client, want 0", few, few*k*2, n)
	}
	_, onPipe := c.wire().PipeStats()
	concurrently(4*few, func(i int) {
		if err := lockUnlock(ctx, c, fmt.Sprintf("lone:many:%d", i), k); err != nil {
			t.Error(err)
		}
	})
	// Pipelined through the go-redis client, or on the pipe once it is
	// dialed (it may be already: a warm-up call in flight beside the
	// callers', on a loaded host, dials it).
	_, nowOnPipe := c.wire().PipeStats()
	if n := seen.piped.Load() + nowOnPipe - onPipe; n == 0 {
		t.Errorf("%d concurrent callers: no call was pipelined, want the batcher or the pipe beyond %d", 4*few, wire.Lones)
	}
}

// ctx is law on every lone connection: wire.Lones callers, each on a lone
// connection of its own when Redis goes silent, all return once their ctx
// ends, and each acquisition that Redis ran is undone once it answers again.
func TestFewLoneCallersCtxIsLaw(t *testing.T) {
	b := startBlackhole(t, shared.Addr())
	c := clientVia(t, b)
	rdb := rdbFor(t, shared)
	ctx := ctxT(t)
	warmLones(t, ctx, c)
	const budget = 100 * time.Millisecond
	b.CutReplies()
	concurrently(wire.Lones, func(i int) {
		cctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		start := time.Now()
		err := c.Mutex(fmt.Sprintf("lone:law:few:%d", i)).Lock(cctx)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock on a silent Redis: %v, want the ctx's error", err)
		}
		if took > budget+900*time.Millisecond {
			t.Errorf("Lock returned %v after its ctx's %v", took, budget)
		}
	})
	// Each cut connection was dropped, and none can be redialed while
	// Redis is silent: every one of them carried a call.
	if n := c.wire().LonesReady(); n != 0 {
		t.Errorf("%d lone connections still ready after the cut: not every caller sent on one", n)
	}
	b.Heal()
	for i := range wire.Lones {
		name := fmt.Sprintf("lone:law:few:%d", i)
		waitFor(t, "the abandoned acquisition undone", func() bool {
			return rdb.Exists(ctx, name).Val() == 0
		})
	}
	concurrently(wire.Lones, func(i int) {
		if err := lockUnlock(ctx, c, fmt.Sprintf("lone:law:few:%d", i), 2); err != nil {
			t.Errorf("after healing: %v", err)
		}
	})
}
