package wire

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A caller that read ready just before another caller's failed lone call
// dropped the connection finds it gone once it holds the connection's
// mutex, and goes through the batcher instead of using it.
func TestLoneConnectionDroppedAfterReady(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	w := New(rdb, time.Second, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer func() {
		w.Stop()
		for _, ch := range []<-chan struct{}{w.Drain(), w.Idle()} {
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatal("the wire did not drain: a call is counted as pending forever")
			}
		}
	}()
	ping := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("Do panicked: %v", p)
			}
		}()
		cl := NewCall(redis.NewCmd(ctx, "ping"), nil)
		if _, err := w.Do(ctx, cl); err != nil {
			return err
		}
		defer cl.Free()
		return cl.Cmd.Err()
	}
	for !w.LoneReady() {
		if err := ping(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The state the failed call leaves, as the late caller sees it: the
	// connection dropped, ready not yet cleared, a redial just started.
	l := w.lones[0]
	l.mu.Lock()
	_ = l.conn.Close()
	l.conn = nil
	l.dials.last.Store(time.Now().UnixNano())
	l.mu.Unlock()
	if err := ping(); err != nil {
		t.Fatalf("a call with the lone connection gone: %v", err)
	}
}
