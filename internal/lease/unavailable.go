package lease

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/wire"
)

// unanswered wraps err, the failure of an acquisition's call, in
// ErrUnavailable when Redis gave no answer: a refused, broken or silent
// connection, a pool with no connection to give, a reply never read. The
// call failed for want of Redis, as ErrUnavailable documents, whatever the
// transport's own error says. An answer of Redis (an error reply: a wrong
// password, NOPERM, OOM, READONLY) and dlock's own errors are returned as
// they are: a refusal must not read as "cannot reach Redis".
func unanswered(name string, err error) error {
	if err == nil || !IsTransport(err) {
		return err
	}
	return fmt.Errorf("%w (lock %q): %w", ErrUnavailable, name, err)
}

// IsTransport reports whether err is a failure to get an answer from Redis
// (a refused, reset or silent connection, a pool timeout, a reply never
// read), as opposed to an answer of Redis. The breaker's outage classes
// (internal/tier) build on it.
func IsTransport(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		return false // a reply, whatever else it wraps
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, wire.ErrNoReply)
}
