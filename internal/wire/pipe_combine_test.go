package wire

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A caller that writes its call itself (combine) never waits for the
// socket: on a Redis that stopped reading, what the socket does not take
// goes to the writer, which writes it before any later call, so that the
// stream stays whole and the connection is kept.
func TestCombinedWriteLeavesWhatTheSocketRefusesToTheWriter(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{
		Addr:        r.Addr(),
		ReadTimeout: 30 * time.Second, // the connection outlives the pause
		// go-redis's default keeps a SET of 16 MB waiting 3 s for the socket.
		WriteTimeout:             30 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	w := pipedWire(t, rdb)
	if c := w.pipe.cur.Load(); c == nil || c.raw == nil {
		t.Fatal("the pipe's TCP connection has no socket a caller may write")
	}
	resume := pauseRedis(t, r)

	values := map[string][]byte{"pipe:combine:big": bytes.Repeat([]byte("b"), 16<<20)}
	for i := range 4 {
		values["pipe:combine:"+strconv.Itoa(i)] = []byte("small-" + strconv.Itoa(i))
	}
	var undone sync.WaitGroup
	var mu sync.Mutex
	var replies []string
	send := func(key string) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		cl := NewCall(redis.NewCmd(ctx, "set", key, values[key]), nil)
		undone.Add(1)
		cl.Undo = UndoFunc(func(_ context.Context, cmd redis.Cmder) {
			defer undone.Done()
			mu.Lock()
			defer mu.Unlock()
			v, err := cmd.(*redis.Cmd).Result()
			replies = append(replies, key+": "+toString(v, err))
		})
		start := time.Now()
		left, err := w.Do(ctx, cl)
		if !left || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("SET %s on a paused Redis: left %v, %v; want it left with the ctx's error", key, left, err)
			undone.Done()
		}
		// Slack for a loaded 2-core box: a write that waited for the
		// socket would wait until Redis reads again.
		if took := time.Since(start); took > time.Second {
			t.Errorf("SET %s returned %v after its ctx's 200 ms", key, took)
		}
	}
	send("pipe:combine:big")
	if w.pipe.rests.Load() == 0 {
		t.Fatal("the caller's write took the whole 16 MB: the socket was never full, and nothing was left to the writer")
	}
	// Calls behind it queue for the writer, which writes the rest first.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); send("pipe:combine:" + strconv.Itoa(i)) }()
	}
	wg.Wait()
	resume()
	waitUndone(t, &undone)
	for _, s := range replies {
		if s[len(s)-2:] != "OK" {
			t.Errorf("an abandoned call's reply: %s, want OK", s)
		}
	}
	if n := w.PipeConns(); n != 1 {
		t.Errorf("the pipe put %d connections in use, want 1: a broken stream made Redis drop it", n)
	}
	for key, want := range values {
		got, err := rdb.Get(context.Background(), key).Bytes()
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("GET %s: %d bytes, %v; want the %d bytes set", key, len(got), err, len(want))
		}
	}
}

func toString(v any, err error) string {
	if err != nil {
		return err.Error()
	}
	s, _ := v.(string)
	return s
}

// Stop (Engine.Close past its close timeout) while a caller writes the
// pipe's queue (combine): a call queued meanwhile is still sent, as calls
// made after Stop are. Before, the writer returned at once (it does not
// write while a caller does) and the caller's poke at the end reached
// nobody: the call stayed queued for ever (19 of 20 runs).
func TestStopWhileACallerWritesSendsTheCallsQueuedBehind(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	w := New(rdb, time.Second, true)
	w.lones = nil
	w.pipe.redial(&w.batch)
	waitUntil(t, "the pipe in use", func() bool { return w.Piping() })
	waitUntil(t, "the writer parked", func() bool {
		w.batch.mu.Lock()
		defer w.batch.mu.Unlock()
		return w.batch.pipeIdle
	})
	ctx := context.Background()

	// A's caller finds the writer parked and writes the queue itself; its
	// argument holds it inside combine (combining set).
	a := newGateArg()
	aDone := make(chan error, 1)
	go func() { aDone <- do(ctx, w, redis.NewCmd(ctx, "echo", a)) }()
	<-a.entered
	w.batch.mu.Lock()
	combining := w.batch.combining
	w.batch.mu.Unlock()
	if !combining {
		t.Fatal("A's caller did not combine")
	}
	// B queues behind the combiner.
	bDone := make(chan error, 1)
	go func() {
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		bDone <- do(bctx, w, redis.NewIntCmd(bctx, "incr", "pipe:review:stop"))
	}()
	waitUntil(t, "B queued", func() bool { return queueLen(w) == 1 })
	w.Stop()
	time.Sleep(100 * time.Millisecond) // the writer sees the stop
	close(a.release)
	if err := <-aDone; err != nil {
		t.Errorf("A: %v", err)
	}
	if err := <-bDone; err != nil {
		t.Errorf("B, queued while A's caller wrote, when Stop came: %v (left in the queue: %d)", err, queueLen(w))
	}
}

// The writer's last write deadline expired: a caller's raw write fails with
// os.ErrDeadlineExceeded having written nothing; all of it goes to the
// writer, the connection is kept and the call answered.
func TestCallerWriteAfterTheWritersDeadlineExpired(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), WriteTimeout: 100 * time.Millisecond,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = rdb.Close() })
	w := pipedWire(t, rdb)
	ctx := context.Background()
	w.pipe.writes.Store(0)
	// The writer writes once (its deadline: now+100ms), then parks.
	w.batch.mu.Lock()
	w.batch.pending++
	w.batch.mu.Unlock()
	first := NewCall(redis.NewCmd(ctx, "ping"), nil)
	w.pipe.write(&w.batch, []*Call{first}, false)
	if _, err := w.wait(ctx, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	for i := range 5 {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := do(c, w, redis.NewCmd(c, "ping")); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		cancel()
	}
	if n := w.PipeConns(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
	if w.pipe.rests.Load() == 0 {
		t.Errorf("no rest: the expired deadline did not reach the caller's raw write")
	}
}

// A caller's write leaves a rest; the connection breaks while the writer
// writes it; the calls are resent, and the next connection carries calls
// (no stale rest written on it, no call left queued).
func TestRestOfABrokenConnectionIsNotWrittenOnTheNext(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = rdb.Close() })
	w := pipedWire(t, rdb)
	resume := pauseRedis(t, r)
	big := bytes.Repeat([]byte("b"), 16<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_ = do(ctx, w, redis.NewCmd(ctx, "set", "pipe:review:big", big))
	cancel()
	if w.pipe.rests.Load() == 0 {
		t.Fatal("no rest")
	}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_ = do(ctx, w, redis.NewCmd(ctx, "set", "pipe:review:s"+strconv.Itoa(i), "x"))
		cancel()
	}
	c := w.pipe.cur.Load()
	_ = c.nc.Close() // the network drops it
	waitUntil(t, "the connection out of use", func() bool { return w.pipe.cur.Load() != c })
	resume()
	waitUntil(t, "a new connection", func() bool { w.pipe.redial(&w.batch); return w.Piping() })
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if err := do(ctx, w, redis.NewIntCmd(ctx, "incr", "pipe:review:after")); err != nil {
			t.Fatalf("call %d on the new connection: %v", i, err)
		}
		cancel()
	}
	waitUntil(t, "the big SET resent", func() bool {
		n, _ := rdb.StrLen(context.Background(), "pipe:review:big").Result()
		return n == int64(len(big))
	})
}

// pauseRedis pauses r (SIGSTOP) and returns what resumes it; the test's
// cleanup resumes it if the test did not.
func pauseRedis(t *testing.T, r *testenv.Redis) (resume func()) {
	t.Helper()
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := r.Resume(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}
