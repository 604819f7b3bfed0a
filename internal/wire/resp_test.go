package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The pipe's codec writes what go-redis would write for the argument
// types dlock sends, and refuses (pipeable) what it cannot write.
func TestAppendCommand(t *testing.T) {
	s := "key"
	d := &digest{}
	b, err := appendCommand(nil, []any{"evalsha", d, 2, &s, []byte("b"), int64(-7), uint64(9)})
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	want := "*7\r\n$7\r\nevalsha\r\n$40\r\n" + string(unknownSHA) + "\r\n$1\r\n2\r\n$3\r\nkey\r\n$1\r\nb\r\n$2\r\n-7\r\n$1\r\n9\r\n"
	if got != want {
		t.Fatalf("appendCommand wrote %q, want %q", got, want)
	}
	for _, args := range [][]any{{"set", "k", 1.5}, {"set", "k", true}, {"set", "k", nil}} {
		if pipeable(redis.NewCmd(context.Background(), args...)) {
			t.Errorf("%v: pipeable, but the codec cannot write %T", args, args[2])
		}
	}
	if pipeable(redis.NewStringCmd(context.Background(), "get", "k")) {
		t.Error("a StringCmd is pipeable, but setReply cannot fill it")
	}
}

// Replies decode as go-redis decodes them; bytes that are not a reply are
// the connection's error, never a value.
func TestReadReply(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{
		{":42\r\n", "int64 42"},
		{":-3\r\n", "int64 -3"},
		{"+OK\r\n", "string OK"},
		{"$5\r\nhe\r\nl\r\n", "string he\r\nl"},
		{"$0\r\n\r\n", "string "},
		{"$-1\r\n", "<nil> <nil>"},
		{"*-1\r\n", "<nil> <nil>"},
		{"-NOSCRIPT No matching script\r\n", "wire.replyError NOSCRIPT No matching script"},
		{"*3\r\n:1\r\n$1\r\na\r\n$-1\r\n", "[]interface {} [1 a <nil>]"},
		{"$70000\r\n" + strings.Repeat("x", 70000) + "\r\n", "string " + strings.Repeat("x", 70000)},
	} {
		v, err := readReply(bufio.NewReader(strings.NewReader(c.in)))
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if got := fmt.Sprintf("%T %v", v, v); got != c.want {
			t.Errorf("%q read as %s, want %s", c.in, got, c.want)
		}
	}
	for _, in := range []string{
		"?1\r\n", ":1x\r\n", ":1\n", "$3\r\nabcd\r\n", "$-2\r\n", "*2\r\n:1\r\n", "$9999999999\r\n",
		strings.Repeat("*1\r\n", maxReplyDepth+1) + ":1\r\n", ":12",
		"$70000\r\n" + strings.Repeat("x", 69999) + "\r\n", "*1000000\r\n:1\r\n",
	} {
		if v, err := readReply(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("%q read as %#v, want an error", in, v)
		}
	}
}

// A reply goes into a command as go-redis would put it, and an IntCmd
// takes nothing but an integer: a string, an array or a status is an
// error, never a value (a lock script's 0 is a grant).
func TestSetReply(t *testing.T) {
	ctx := context.Background()
	n := redis.NewIntCmd(ctx, "evalsha")
	setReply(n, int64(7))
	if v, err := n.Result(); v != 7 || err != nil {
		t.Errorf("IntCmd given 7: %d, %v", v, err)
	}
	for _, bad := range []any{"7", []any{int64(7)}} {
		n := redis.NewIntCmd(ctx, "evalsha")
		setReply(n, bad)
		if !errors.Is(n.Err(), errReplyType) {
			t.Errorf("IntCmd given %#v: %d, %v; want errReplyType", bad, n.Val(), n.Err())
		}
	}
	n = redis.NewIntCmd(ctx, "evalsha")
	setReply(n, nil)
	if !errors.Is(n.Err(), redis.Nil) {
		t.Errorf("IntCmd given a null: %v, want redis.Nil", n.Err())
	}
	c := redis.NewCmd(ctx, "evalsha")
	setReply(c, replyError("TRYAGAIN Multiple keys request during rehashing of slot"))
	if !redis.IsTryAgainError(c.Err()) || !isRetryable(c.Err()) || !isReply(c.Err()) {
		t.Errorf("an error reply: %v, not read as go-redis reads it", c.Err())
	}
	c = redis.NewCmd(ctx, "evalsha")
	setReply(c, []any{int64(1), "a", nil})
	if v, err := c.Slice(); err != nil || fmt.Sprint(v) != "[1 a <nil>]" {
		t.Errorf("Cmd given an array: %v, %v", v, err)
	}
}
