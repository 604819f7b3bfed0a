package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A pipeline whose connection fails its AUTH reports that only as Exec's
// error, and leaves each command with a nil error and a zero value. The
// wire must give every call of such a batch the connection's error: none
// may reach its caller as a reply.
func TestPipelineConnectionErrorReachesEveryCall(t *testing.T) {
	r := testenv.StartRedis(t)
	if _, err := r.Do(context.Background(), "CONFIG", "SET", "requirepass", "right"); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Password: "wrong",
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer rdb.Close()
	w := New(rdb, time.Second, false) // every call through the batcher
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := redis.NewIntCmd(ctx, "incr", "counter")
			cl := NewCall(cmd, nil)
			if left, err := w.Do(ctx, cl); left {
				errs <- err
				return
			}
			v, err := cmd.Result()
			cl.Free()
			if err == nil {
				err = fmt.Errorf("a reply of %d with no error", v)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("call through a refused connection: %v, want WRONGPASS", err)
		}
	}
}

// A command that no reply reached fails with ErrNoReply, whatever go-redis
// left in it; one error reply in a batch is that command's alone.
func TestRequireReplyAndFailUnanswered(t *testing.T) {
	ic := redis.NewIntCmd(context.Background(), "incr", "x")
	expectReply(ic)
	requireReply(ic)
	if !errors.Is(ic.Err(), ErrNoReply) {
		t.Errorf("an integer command never answered: %v, want ErrNoReply", ic.Err())
	}
	c := redis.NewCmd(context.Background(), "evalsha", "x", 0)
	requireReply(c)
	if !errors.Is(c.Err(), ErrNoReply) {
		t.Errorf("a command never answered: %v, want ErrNoReply", c.Err())
	}
	answered := redis.NewIntCmd(context.Background(), "incr", "x")
	expectReply(answered)
	answered.SetVal(0) // a real reply of 0
	requireReply(answered)
	if answered.Err() != nil {
		t.Errorf("a reply of 0: %v, want no error", answered.Err())
	}

	own := redis.NewCmd(context.Background(), "evalsha", "x", 0)
	own.SetErr(errors.New("NOSCRIPT No matching script"))
	other := redis.NewCmd(context.Background(), "evalsha", "y", 0)
	other.SetVal(int64(1))
	failUnanswered([]*Call{{Cmd: own}, {Cmd: other}}, own.Err())
	if other.Err() != nil {
		t.Errorf("a command's own error reply failed its neighbour: %v", other.Err())
	}
	conn := errors.New("WRONGPASS invalid username-password pair")
	a, b := redis.NewCmd(context.Background(), "get", "a"), redis.NewCmd(context.Background(), "get", "b")
	failUnanswered([]*Call{{Cmd: a}, {Cmd: b}}, conn)
	if a.Err() != conn || b.Err() != conn {
		t.Errorf("a connection's error: %v, %v; want it on both commands", a.Err(), b.Err())
	}
}

// A NOSCRIPT resend that also asks for the script's SHA1 goes out as a
// pipeline; when that pipeline's connection fails its AUTH, the resend must
// carry the connection's error, never the zero value of a command nobody
// answered (an integer 0 reads as "released" or "the latch exists").
func TestEvalInsteadConnectionErrorIsNoReply(t *testing.T) {
	r := testenv.StartRedis(t)
	if _, err := r.Do(context.Background(), "CONFIG", "SET", "requirepass", "right"); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Password: "wrong",
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer rdb.Close()
	s := NewScript("return 1")
	for _, cmd := range []redis.Cmder{
		redis.NewIntCmd(context.Background(), "evalsha", s.sha, 1, "k"),
		redis.NewCmd(context.Background(), "evalsha", s.sha, 1, "k"),
	} {
		expectReply(cmd)
		cmd.SetErr(errors.New("NOSCRIPT No matching script"))
		s.evalInstead(context.Background(), rdb, cmd)
		requireReply(cmd)
		if err := cmd.Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("%T resent through a refused connection: %v, want WRONGPASS", cmd, err)
		}
	}
}
