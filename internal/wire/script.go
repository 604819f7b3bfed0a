package wire

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script run by its SHA1 (EVALSHA), and by its source
// (EVAL) when the server does not know it (first use, restart, failover).
// Unlike redis.Script it takes its arguments already boxed, so the hot path
// allocates only what go-redis itself needs. A Script is immutable but for
// its SHA1, learned once from Redis (digest.go).
type Script struct {
	src any     // the source, boxed once
	sha *digest // its SHA1 in hex, as EVALSHA's argument
	// variant makes the source a Wire of another Variant runs instead (nil:
	// the script has no variants); made are the variants made so far.
	variant func(Variant) string
	made    sync.Map // Variant -> *Script
}

// Variant is what a Wire's scripts are adapted to: a namespace that
// prefixes the channels they build, and sharded pub/sub. The zero Variant
// runs the scripts as written.
type Variant struct {
	Namespace string // the prefix of every key and channel ("ns:"), or ""
	Sharded   bool
}

// NewScript returns the script of src. It computes nothing: the script's
// SHA1 comes from Redis at its first use (digest.go).
func NewScript(src string) *Script {
	return &Script{src: src, sha: new(digest)}
}

// WithVariants sets how s's source is adapted to a Variant (the kind that
// owns the script knows what to change), and returns s. Call it before s
// is used.
func (s *Script) WithVariants(adapt func(Variant) string) *Script {
	s.variant = adapt
	return s
}

// For returns the script a Wire of Variant v runs in place of s: s itself
// for the zero Variant or a script without variants. Safe for concurrent
// use; each variant is made once.
func (s *Script) For(v Variant) *Script {
	if s.variant == nil || v == (Variant{}) {
		return s
	}
	if m, ok := s.made.Load(v); ok {
		return m.(*Script)
	}
	m, _ := s.made.LoadOrStore(v, NewScript(s.variant(v)))
	return m.(*Script)
}

// LibMarker is the line where a script wants its library spliced in: after
// the common case it runs without the library's helpers, whose definitions
// cost Redis more than that case itself.
const LibMarker = "--[[lib.lua]]\n"

// WithLib returns script with lib spliced in at its LibMarker line, or
// prepended when it has none.
func WithLib(lib, script string) string {
	if before, after, ok := strings.Cut(script, LibMarker); ok {
		return before + lib + after
	}
	return lib + script
}

// Args lays out EVALSHA's arguments in buf: the command, the SHA1, the key
// count, keys and args.
func (s *Script) Args(buf []any, keys []any, args ...any) []any {
	buf = append(buf[:0], "evalsha", s.sha, len(keys))
	buf = append(buf, keys...)
	return append(buf, args...)
}

// Cmd builds an EVALSHA of s whose reply is read as is.
func (s *Script) Cmd(keys []any, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(context.Background(), s.Args(make([]any, 0, 3+len(keys)+len(args)), keys, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// IntCmd builds an EVALSHA of s whose reply is one integer, with its
// arguments laid out in buf (which the caller keeps until the reply is in).
func (s *Script) IntCmd(buf []any, keys []any, args ...any) *redis.IntCmd {
	cmd := redis.NewIntCmd(context.Background(), s.Args(buf, keys, args...)...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// IntCall is a Call (NewCall) of an EVALSHA of s whose reply is one
// integer, with its arguments laid out in buf (which the caller keeps until
// the reply is in). Unlike NewCall of IntCmd it allocates nothing: the
// command is part of the pooled Call, so it is read before Free and not
// kept after.
func (s *Script) IntCall(buf []any, keys []any, args ...any) *Call {
	cl := callPool.Get().(*Call)
	cl.intCmd = *redis.NewIntCmd(context.Background(), s.Args(buf, keys, args...)...)
	cl.intCmd.SetFirstKeyPos(3)
	return cl.init(&cl.intCmd, s)
}

// Run sends an EVALSHA of s through w's batcher and returns its reply, or,
// once ctx is done, a command failed with ctx's cause (the call itself goes
// on, unobserved). keys and args are boxed by the caller.
func (s *Script) Run(ctx context.Context, w *Wire, keys []any, args ...any) *redis.Cmd {
	return s.run(ctx, w, false, keys, args)
}

// RunDroppable is Run for a call that is not sent at all once ctx is done
// before it is: a renewal, which must not extend a hold after its caller
// stopped waiting for it (the holder may have been told the hold is lost
// meanwhile).
func (s *Script) RunDroppable(ctx context.Context, w *Wire, keys []any, args ...any) *redis.Cmd {
	return s.run(ctx, w, true, keys, args)
}

func (s *Script) run(ctx context.Context, w *Wire, droppable bool, keys []any, args []any) *redis.Cmd {
	cmd := s.Cmd(keys, args...)
	cl := NewCall(cmd, s)
	cl.Droppable = droppable
	if left, err := w.Do(ctx, cl); left {
		failed := redis.NewCmd(ctx)
		failed.SetErr(err)
		return failed
	}
	cl.Free()
	return cmd
}

// Eval runs s by its source on rdb, outside the batcher.
func (s *Script) Eval(ctx context.Context, rdb redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return rdb.Eval(ctx, s.src.(string), keys, args...)
}

// evalInstead runs cmd, an EVALSHA of s that failed with NOSCRIPT, as an
// EVAL of the same arguments (which loads the script), and puts the outcome
// into cmd. Until s's SHA1 is known, the same round trip asks Redis for it
// (digest.go).
func (s *Script) evalInstead(ctx context.Context, rdb processor, cmd redis.Cmder) {
	args := append([]any(nil), cmd.Args()...)
	args[0], args[1] = "eval", s.src
	var e redis.Cmder
	switch cmd.(type) {
	case *redis.IntCmd:
		e = redis.NewIntCmd(ctx, args...)
	case *redis.Cmd:
		e = redis.NewCmd(ctx, args...)
	default:
		cmd.SetErr(errUnsupported(cmd.Name()))
		return
	}
	var keys []any
	if n, ok := args[2].(int); ok && n > 0 {
		e.SetFirstKeyPos(3)
		keys = args[3 : 3+n]
	}
	expectReply(e)
	if sha := s.sha.ask(ctx, s.src, keys); sha != nil {
		pipe := rdb.Pipeline()
		_ = pipe.Process(ctx, e)
		_ = pipe.Process(ctx, sha)
		if _, err := pipe.Exec(ctx); err != nil && e.Err() == nil && sha.Err() == nil {
			// Neither command's own reply: the connection's (reply.go).
			e.SetErr(err)
		}
		s.sha.learn(sha)
	} else {
		_ = rdb.Process(ctx, e)
	}
	requireReply(e)
	switch cmd := cmd.(type) {
	case *redis.IntCmd:
		cmd.SetVal(e.(*redis.IntCmd).Val())
	case *redis.Cmd:
		cmd.SetVal(e.(*redis.Cmd).Val())
	}
	cmd.SetErr(e.Err())
}

type errUnsupported string

func (e errUnsupported) Error() string { return "wire: cannot resend a " + string(e) + " as EVAL" }

// processor sends one command, or a pipeline: a go-redis client or one of
// its connections.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }
