package wire

import (
	"bufio"
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pipe (pipe.go) writes commands and reads replies itself, in RESP2:
// go-redis reads a connection only for the call that wrote on it, and the
// pipe's reader must read replies while its writer writes more. This file
// is that codec, for the commands dlock sends (an EVALSHA or a plain
// command, arguments of a few types) and the replies they get. Anything
// else goes through go-redis (pipeable).

// replyError is an error reply of Redis read by the pipe. Like go-redis's
// own, it is a redis.Error, so that go-redis's helpers (IsTryAgainError,
// HasErrorPrefix) and the wire's (isReply, isRedirect) read it alike.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as a reply of Redis (redis.Error).
func (replyError) RedisError() {}

// errProtocol is what the pipe's reader reports for bytes that are not a
// RESP2 reply: the connection is then dropped and its calls resent.
var errProtocol = errors.New("dlock: malformed reply from redis")

// errReplyType fails a command whose reply is of a type it cannot hold (an
// IntCmd answered with a string): never read as a value.
var errReplyType = errors.New("dlock: reply of an unexpected type from redis")

// pipeable reports whether the pipe can send cmd and read its reply into
// it: an IntCmd or a Cmd whose arguments appendCommand can write.
func pipeable(cmd redis.Cmder) bool {
	switch cmd.(type) {
	case *redis.IntCmd, *redis.Cmd:
	default:
		return false
	}
	for _, a := range cmd.Args() {
		switch a := a.(type) {
		case *string:
			if a == nil {
				return false // go-redis writes it as ""
			}
		case time.Time, *time.Time:
			// A BinaryMarshaler, but go-redis writes it as RFC 3339.
			return false
		case string, []byte, int, int64, int32, uint32, uint64, encoding.BinaryMarshaler:
		case nil:
			return false // go-redis writes it as ""; nothing of dlock's sends one
		default:
			return false
		}
	}
	return true
}

// appendCommand appends args as a RESP2 array of bulk strings. Call it
// only for a command pipeable accepted. When an argument's MarshalBinary
// fails it returns the error, and b is to be cut back to its length
// before the call: the call then fails with the error, as go-redis fails
// a call whose argument it cannot marshal.
func appendCommand(b []byte, args []any) ([]byte, error) {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	var num [20]byte
	for _, a := range args {
		var s []byte
		switch v := a.(type) {
		case string:
			b = appendBulk(b, v)
			continue
		case *string:
			b = appendBulk(b, *v)
			continue
		case []byte:
			s = v
		case int:
			s = strconv.AppendInt(num[:0], int64(v), 10)
		case int64:
			s = strconv.AppendInt(num[:0], v, 10)
		case int32:
			s = strconv.AppendInt(num[:0], int64(v), 10)
		case uint32:
			s = strconv.AppendUint(num[:0], uint64(v), 10)
		case uint64:
			s = strconv.AppendUint(num[:0], v, 10)
		case encoding.BinaryMarshaler:
			// A script's digest, whose MarshalBinary never fails, or a
			// caller's argument, whose may.
			var err error
			if s, err = v.MarshalBinary(); err != nil {
				return b, err
			}
		}
		b = appendBulk(b, s)
	}
	return b, nil
}

// appendBulk appends s as a RESP2 bulk string.
func appendBulk[T string | []byte](b []byte, s T) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// maxReplyDepth, maxBulk and maxArray bound the shape of one reply: dlock's
// scripts answer an integer or a short array.
const (
	maxReplyDepth = 8
	maxBulk       = 512 << 20 // Redis's own proto-max-bulk-len default
	maxArray      = 1 << 20
)

// readReply reads one RESP2 reply: an int64, a string (simple or bulk),
// nil (a null bulk string or array), a []any of those, or a replyError.
// Its error is the connection's (or errProtocol), never Redis's.
func readReply(br *bufio.Reader) (any, error) { return readValue(br, 0) }

func readValue(br *bufio.Reader, depth int) (any, error) {
	line, err := readLine(br)
	if err != nil {
		return nil, err
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return string(body), nil
	case '-':
		return replyError(body), nil
	case ':':
		n, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, errProtocol
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(string(body))
		if err != nil || n < -1 || n > maxBulk {
			return nil, errProtocol
		}
		if n == -1 {
			return nil, nil
		}
		var buf []byte
		if n <= 64<<10 {
			buf = make([]byte, n+2)
			if _, err := io.ReadFull(br, buf); err != nil {
				return nil, err
			}
		} else {
			// Grown as bytes come, as arrays are.
			var bb bytes.Buffer
			if _, err := io.CopyN(&bb, br, int64(n+2)); err != nil {
				return nil, err
			}
			buf = bb.Bytes()
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, errProtocol
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(string(body))
		if err != nil || n < -1 || n > maxArray || depth >= maxReplyDepth {
			return nil, errProtocol
		}
		if n == -1 {
			return nil, nil
		}
		// Grown as elements come, not made at the size the header claims:
		// a few bytes must not cost megabytes.
		vs := make([]any, 0, min(n, 64))
		for range n {
			v, err := readValue(br, depth+1)
			if err != nil {
				return nil, err
			}
			vs = append(vs, v)
		}
		return vs, nil
	}
	return nil, errProtocol
}

// readLine returns one line without its CRLF; the slice is valid until the
// next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errProtocol
		}
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, errProtocol
	}
	return line[:len(line)-2], nil
}

// setReply puts reply v, as readReply returned it, into cmd, as go-redis
// would have read it: a null is redis.Nil, an error reply the command's
// error, and an IntCmd takes nothing but an integer.
func setReply(cmd redis.Cmder, v any) {
	switch r := v.(type) {
	case nil:
		cmd.SetErr(redis.Nil)
		return
	case replyError:
		cmd.SetErr(r)
		return
	}
	switch c := cmd.(type) {
	case *redis.IntCmd:
		n, ok := v.(int64)
		if !ok {
			c.SetErr(fmt.Errorf("%w: %T for %s", errReplyType, v, c.Name()))
			return
		}
		c.SetVal(n)
	case *redis.Cmd:
		c.SetVal(v)
	}
}
