package dlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts live in scripts/*.lua. Every lock script is prefixed with
// lib.lua, which holds the hand-off and fencing helpers they share.
var (
	//go:embed scripts/lib.lua
	luaLib string
	//go:embed scripts/acquire.lua
	luaAcquire string
	//go:embed scripts/release.lua
	luaRelease string
	//go:embed scripts/leave.lua
	luaLeave string
	//go:embed scripts/force.lua
	luaForce string
	//go:embed scripts/renew.lua
	luaRenew string
	//go:embed scripts/rwlib.lua
	luaRWLib string
	//go:embed scripts/rwlock.lua
	luaRWLock string
	//go:embed scripts/rlock.lua
	luaRLock string
	//go:embed scripts/rwunlock.lua
	luaRWUnlock string
	//go:embed scripts/rwleave.lua
	luaRWLeave string

	scriptAcquire = newScript(withLib(luaLib, luaAcquire))
	scriptRelease = newScript(withLib(luaLib, luaRelease))
	scriptLeave   = newScript(withLib(luaLib, luaLeave))
	scriptForce   = newScript(withLib(luaLib, luaForce))
	scriptRenew   = newScript(withLib(luaLib, luaRenew))

	// Read-write lock scripts: lib.lua, then rwlib.lua, then the script.
	scriptRWLock   = newScript(withLib(luaLib+luaRWLib, luaRWLock))
	scriptRLock    = newScript(withLib(luaLib+luaRWLib, luaRLock))
	scriptRWUnlock = newScript(withLib(luaLib+luaRWLib, luaRWUnlock))
	scriptRWLeave  = newScript(withLib(luaLib+luaRWLib, luaRWLeave))
)

// libMarker is the line where a script wants lib.lua spliced in: after the
// common case it runs without lib.lua's helpers, whose definitions cost
// Redis more than that case itself.
const libMarker = "--[[lib.lua]]\n"

// withLib returns script with lib spliced in at its libMarker line, or
// prepended when it has none.
func withLib(lib, script string) string {
	if before, after, ok := strings.Cut(script, libMarker); ok {
		return before + lib + after
	}
	return lib + script
}

// script is a Lua script run by its SHA1 (EVALSHA), and by its source
// (EVAL) when the server does not know it (first use, restart, failover).
// Unlike redis.Script it takes its arguments already boxed, so the hot path
// allocates only what go-redis itself needs.
type script struct {
	src any // the source, boxed once
	sha any // its SHA1 in hex, boxed once
}

func newScript(src string) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:])}
}

// args lays out EVALSHA's arguments: the command, the SHA1, the key count,
// keys and args.
func (s *script) args(keys []any, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", s.sha, len(keys))
	a = append(a, keys...)
	return append(a, args...)
}

// cmd builds an EVALSHA of s whose reply is read as is.
func (s *script) cmd(keys []any, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(context.Background(), s.args(keys, args)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// run sends an EVALSHA of s through c's batcher and returns its reply, or,
// once ctx is done, a command failed with ctx's cause (the call itself goes
// on, unobserved). keys and args are boxed by the caller.
func (s *script) run(ctx context.Context, c *Client, keys []any, args ...any) *redis.Cmd {
	cmd := s.cmd(keys, args...)
	cl := newCall(cmd, s)
	if left, err := c.batch.do(ctx, cl); left {
		failed := redis.NewCmd(ctx)
		failed.SetErr(err)
		return failed
	}
	cl.free()
	return cmd
}

// evalInstead runs cmd, an EVALSHA of s that failed with NOSCRIPT, as an
// EVAL of the same arguments (which loads the script), and puts the outcome
// into cmd.
func (s *script) evalInstead(ctx context.Context, rdb redis.UniversalClient, cmd redis.Cmder) {
	args := append([]any(nil), cmd.Args()...)
	args[0], args[1] = "eval", s.src
	keyed := func(c redis.Cmder) redis.Cmder {
		if n, ok := args[2].(int); ok && n > 0 {
			c.SetFirstKeyPos(3)
		}
		return c
	}
	switch cmd := cmd.(type) {
	case *redis.IntCmd:
		e := redis.NewIntCmd(ctx, args...)
		_ = rdb.Process(ctx, keyed(e))
		cmd.SetVal(e.Val())
		cmd.SetErr(e.Err())
	case *redis.Cmd:
		e := redis.NewCmd(ctx, args...)
		_ = rdb.Process(ctx, keyed(e))
		cmd.SetVal(e.Val())
		cmd.SetErr(e.Err())
	default:
		panic("dlock: evalInstead of a " + cmd.Name() + " command")
	}
}
