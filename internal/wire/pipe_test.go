package wire

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// pipedWire returns a Wire over rdb whose calls all go through its pipe
// once it is ready (no lone connections), with the pipe dialed and in use.
func pipedWire(t *testing.T, rdb *redis.Client) *Wire {
	t.Helper()
	w := New(rdb, time.Second, true)
	w.lones = nil
	t.Cleanup(func() { stopWire(t, w) })
	w.pipe.redial(&w.batch)
	waitUntil(t, "the pipe in use", func() bool { return w.Piping() })
	return w
}

// stopWire stops w as Close does: its calls answered, its background work
// done, then its workers and connections ended.
func stopWire(t *testing.T, w *Wire) {
	t.Helper()
	for _, ch := range []<-chan struct{}{w.Drain(), w.Idle()} {
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Error("the wire did not drain: a call is counted as pending forever")
		}
	}
	w.Stop()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitUndone waits until every abandoned call counted in undone has run
// its Undo.
func waitUndone(t *testing.T, undone *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { undone.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the abandoned calls' Undo did not run")
	}
}

// do sends cmd through w and returns it with its reply, or ctx's cause.
func do(ctx context.Context, w *Wire, cmd redis.Cmder) error {
	cl := NewCall(cmd, nil)
	if left, err := w.Do(ctx, cl); left {
		return err
	}
	cl.Free()
	return nil
}

// Many callers' calls on the pipe each get their own reply, whatever its
// kind, however the writes and reads interleave: every goroutine counts a
// key of its own with INCR, so a reply handed to the wrong call shows as a
// wrong count, and among them go a null, an error reply and an array.
func TestPipeAnswersEveryCallItsOwnReply(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	var seen atomic.Int64
	rdb.AddHook(countHookFor(&seen))
	w := pipedWire(t, rdb)
	ctx := context.Background()
	if err := rdb.Set(ctx, "pipe:str", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	seen.Store(0)
	writes0, calls0 := w.PipeStats()
	const g, n = 32, 200
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "pipe:n:" + strconv.Itoa(i)
			for j := 1; j <= n; j++ {
				incr := redis.NewIntCmd(ctx, "incr", key)
				if err := do(ctx, w, incr); err != nil || incr.Err() != nil || incr.Val() != int64(j) {
					t.Errorf("INCR %s, call %d: %d, %v, %v", key, j, incr.Val(), err, incr.Err())
					return
				}
				switch j % 4 {
				case 0:
					get := redis.NewCmd(ctx, "get", "pipe:missing:"+key)
					if err := do(ctx, w, get); err != nil || !errors.Is(get.Err(), redis.Nil) {
						t.Errorf("GET of a missing key: %v, %v, want redis.Nil", get.Val(), get.Err())
						return
					}
				case 1:
					wrong := redis.NewIntCmd(ctx, "hlen", "pipe:str")
					var re redis.Error
					if err := do(ctx, w, wrong); err != nil || !errors.As(wrong.Err(), &re) || !redis.HasErrorPrefix(wrong.Err(), "WRONGTYPE") {
						t.Errorf("HLEN of a string: %v, %v, want a WRONGTYPE reply", wrong.Val(), wrong.Err())
						return
					}
				case 2:
					arr := redis.NewCmd(ctx, "eval", "return {KEYS[1], tonumber(ARGV[1]), false}", 1, key, j)
					if err := do(ctx, w, arr); err != nil || arr.Err() != nil || fmt.Sprint(arr.Val()) != fmt.Sprintf("[%s %d <nil>]", key, j) {
						t.Errorf("an array reply: %#v, %v", arr.Val(), arr.Err())
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	writes, calls := w.PipeStats()
	writes, calls = writes-writes0, calls-calls0
	if calls < g*n {
		t.Errorf("the pipe wrote %d calls of at least %d", calls, g*n)
	}
	if s := seen.Load(); s != 0 {
		t.Errorf("the go-redis client given carried %d of the calls, want none", s)
	}
	t.Logf("%d calls in %d writes", calls, writes)
}

// countHookFor returns a hook that counts in n the commands a go-redis
// client sends, alone or piped.
func countHookFor(n *atomic.Int64) redis.Hook { return hookFunc{n} }

type hookFunc struct{ n *atomic.Int64 }

func (h hookFunc) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h hookFunc) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// ctx is law on the pipe: callers whose Redis goes silent return once their
// ctx ends; the pipe drops the connection once a written call waited the
// read timeout, and every call it held is resent through go-redis, so that
// the Undo of each abandoned call sees a reply once Redis answers again.
func TestPipeCtxIsLawOnASilentRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	proxy := testenv.NewFaultProxy(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 300 * time.Millisecond, MaxRetries: 10})
	t.Cleanup(func() { _ = rdb.Close() })
	w := pipedWire(t, rdb)
	proxy.Blackhole()
	const g = 8
	var undone sync.WaitGroup
	undone.Add(g)
	var replied atomic.Int64
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			cl := NewCall(redis.NewIntCmd(ctx, "incr", "pipe:silent:"+strconv.Itoa(i)), nil)
			cl.Undo = UndoFunc(func(_ context.Context, cmd redis.Cmder) {
				if cmd.Err() == nil && cmd.(*redis.IntCmd).Val() >= 1 {
					replied.Add(1)
				}
				undone.Done()
			})
			start := time.Now()
			left, err := w.Do(ctx, cl)
			if !left || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a call on a silent Redis: left %v, %v; want it left with the ctx's error", left, err)
				undone.Done()
				return
			}
			// Slack for a loaded 2-core box; the pipe's read timeout
			// (300 ms) and go-redis's retries would keep it far longer.
			if took := time.Since(start); took > time.Second {
				t.Errorf("a call returned %v after its ctx's 100 ms", took)
			}
		}()
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // the pipe has given up on its connection
	if err := proxy.Heal(); err != nil {
		t.Fatal(err)
	}
	waitUndone(t, &undone)
	if n := replied.Load(); n != g {
		t.Errorf("%d of %d abandoned calls' Undo saw Redis's reply", n, g)
	}
	waitUntil(t, "the pipe in use again", func() bool {
		w.pipe.redial(&w.batch)
		return w.Piping()
	})
	if err := do(context.Background(), w, redis.NewCmd(context.Background(), "ping")); err != nil {
		t.Fatal(err)
	}
}

// A pipe connection that Redis drops under many callers loses no call:
// those it held are resent through go-redis, the workers carry the rest
// meanwhile, and a new connection takes over.
func TestPipeConnectionKilledUnderLoad(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	w := pipedWire(t, rdb)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "pipe:kill:" + strconv.Itoa(i)
			for j := int64(1); ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				incr := redis.NewIntCmd(ctx, "incr", key)
				if err := do(ctx, w, incr); err != nil || incr.Err() != nil {
					t.Errorf("INCR: %v, %v", err, incr.Err())
					return
				}
				// A call resent after the kill may have run twice.
				if incr.Val() < j {
					t.Errorf("INCR %s: %d after %d calls", key, incr.Val(), j)
					return
				}
				j = incr.Val()
				calls.Add(1)
			}
		}()
	}
	waitUntil(t, "calls on the pipe", func() bool { return calls.Load() > 2000 })
	killed := w.PipeConns()
	if err := rdb.Do(ctx, "client", "kill", "type", "normal", "skipme", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a new pipe connection", func() bool { return w.PipeConns() > killed && w.Piping() })
	before := calls.Load()
	waitUntil(t, "calls on the new connection", func() bool { return calls.Load() > before+2000 })
	close(stop)
	wg.Wait()
}

// A script Redis does not know (a first use, SCRIPT FLUSH, a restart) is
// loaded when its EVALSHA on the pipe is answered NOSCRIPT, and the call
// gets the script's reply.
func TestPipeLoadsAScriptRedisLacks(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	w := pipedWire(t, rdb)
	ctx := context.Background()
	s := NewScript("return redis.call('incr', KEYS[1])")
	for i := int64(1); i <= 3; i++ {
		cl := s.IntCall(make([]any, 0, 4), []any{"pipe:script"})
		if left, err := w.Do(ctx, cl); left {
			t.Fatal(err)
		}
		if got, err := cl.Cmd.(*redis.IntCmd).Result(); err != nil || got != i {
			t.Fatalf("call %d: %d, %v", i, got, err)
		}
		cl.Free()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, calls := w.PipeStats(); calls < 3 {
		t.Fatalf("the pipe wrote %d calls, want the 3 script calls", calls)
	}
}
