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
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = r.Resume()
		}
	})

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
	resumed = true
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
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
