package wire

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A lone caller's call of a script with an integer reply allocates nothing
// of its own: the Call and its command come from the pool, the arguments
// from the caller's buffer, and the reply is read on the caller's
// goroutine over the Wire's own connection.
func TestLoneIntCallAllocatesNothing(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	w := New(rdb, time.Second, true)
	defer func() {
		w.Stop()
		<-w.Drain()
		<-w.Idle()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := NewScript("return tonumber(ARGV[1])")
	keys := []any{"k"}
	var one any = 1
	buf := make([]any, 0, 8)
	call := func() {
		cl := s.IntCall(buf, keys, one)
		if _, err := w.Do(ctx, cl); err != nil {
			t.Fatal(err)
		}
		if v, err := cl.intCmd.Result(); err != nil || v != 1 {
			t.Fatalf("reply %d, %v", v, err)
		}
		cl.Free()
	}
	for deadline := time.Now().Add(10 * time.Second); !w.LoneReady(); {
		if time.Now().After(deadline) {
			t.Fatal("the lone connection never became ready")
		}
		call()
		time.Sleep(10 * time.Millisecond)
	}
	call() // the first call on ctx registers its callback
	if n := testing.AllocsPerRun(200, call); n != 0 {
		t.Fatalf("%.1f allocations per lone call, want 0", n)
	}
}
