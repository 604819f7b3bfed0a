package wire

import (
	"errors"
	"math"

	"github.com/redis/go-redis/v9"
)

// A reply is what Redis sent, never what a command holds by default. go-redis
// leaves a command's value at its zero (and its error nil) when the command
// was never sent or its reply never read: a pipeline whose connection failed
// its AUTH or SELECT reports that only as Exec's error, and an integer 0 or
// an empty value would otherwise read as a lock script's answer ("granted,
// token 0", "released"). So the wire marks every command before it is sent
// and fails, after the round trip, every command that no reply reached.

// ErrNoReply is the error of a command that Redis never answered although
// go-redis reported no error for it.
var ErrNoReply = errors.New("dlock: no reply from redis for the command")

// unread is the value an integer command holds until its reply is read: no
// script of dlock answers it.
const unread = math.MinInt64

// expectReply marks cmd as not yet answered.
func expectReply(cmd redis.Cmder) {
	if c, ok := cmd.(*redis.IntCmd); ok {
		c.SetVal(unread)
	}
}

// requireReply fails cmd with ErrNoReply when it has no error and no reply
// was read into it. A *redis.Cmd holds nil until a reply is read (Redis' own
// nil reply is the error redis.Nil); an *redis.IntCmd holds unread.
func requireReply(cmd redis.Cmder) {
	if cmd.Err() != nil {
		return
	}
	switch c := cmd.(type) {
	case *redis.IntCmd:
		if c.Val() == unread {
			c.SetErr(ErrNoReply)
		}
	case *redis.Cmd:
		if c.Val() == nil {
			c.SetErr(ErrNoReply)
		}
	}
}

// failUnanswered gives err, a pipeline's error, to every command of batch
// that has none, unless err is one of the commands' own replies (an error
// reply of Redis to that command: the others were answered). An error that
// no command carries is the connection's (a refused AUTH or SELECT, a
// broken link): no command of the batch was answered.
func failUnanswered(batch []*Call, err error) {
	for _, cl := range batch {
		if e := cl.Cmd.Err(); e != nil && e.Error() == err.Error() {
			return
		}
	}
	for _, cl := range batch {
		if cl.Cmd.Err() == nil {
			cl.Cmd.SetErr(err)
		}
	}
}
