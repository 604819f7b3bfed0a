package dlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"sync/atomic"

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

	scriptAcquire = newScript(luaLib + luaAcquire)
	scriptRelease = newScript(luaLib + luaRelease)
	scriptLeave   = newScript(luaLib + luaLeave)
	scriptForce   = newScript(luaLib + luaForce)
	scriptRenew   = newScript(luaLib + luaRenew)

	// Read-write lock scripts: lib.lua, then rwlib.lua, then the script.
	scriptRWLock   = newScript(luaLib + luaRWLib + luaRWLock)
	scriptRLock    = newScript(luaLib + luaRWLib + luaRLock)
	scriptRWUnlock = newScript(luaLib + luaRWLib + luaRWUnlock)
	scriptRWLeave  = newScript(luaLib + luaRWLib + luaRWLeave)
)

// script runs a Lua script by its SHA1, loading it with EVAL when the server
// does not know it (first use, restart, failover). Unlike redis.Script it
// takes its arguments already boxed, so the hot path allocates only what
// go-redis itself needs.
type script struct {
	src any // the source, boxed once
	sha any // its SHA1 in hex, boxed once
	// loaded is set once an EVAL of the source succeeded: until then the
	// source is sent at once, rather than an EVALSHA that is sure to meet
	// NOSCRIPT and cost a round trip more, on the first call, when a
	// connection may be cold too and a slow grant would eat the hold's TTL.
	// It is a hint shared by every Client: a server that lost its scripts
	// still answers NOSCRIPT, and the call is resent as EVAL.
	loaded atomic.Bool
}

func newScript(src string) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:])}
}

// run sends EVALSHA with keys and args. keys and args are boxed by the caller
// (constants and per-handle values are boxed once and reused).
func (s *script) run(ctx context.Context, rdb redis.UniversalClient, keys []any, args ...any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	if !s.loaded.Load() {
		cmdArgs = append(cmdArgs, "eval", s.src, len(keys))
		cmdArgs = append(cmdArgs, keys...)
		cmdArgs = append(cmdArgs, args...)
		cmd := redis.NewCmd(ctx, cmdArgs...)
		if len(keys) > 0 {
			cmd.SetFirstKeyPos(3)
		}
		_ = rdb.Process(ctx, cmd)
		if err := cmd.Err(); err == nil || isRedisError(err) && !redis.HasErrorPrefix(err, "NOSCRIPT") {
			s.loaded.Store(true)
		}
		return cmd
	}
	cmdArgs = append(cmdArgs, "evalsha", s.sha, len(keys))
	cmdArgs = append(cmdArgs, keys...)
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = rdb.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmdArgs[0], cmdArgs[1] = "eval", s.src
		cmd = redis.NewCmd(ctx, cmdArgs...)
		if len(keys) > 0 {
			cmd.SetFirstKeyPos(3)
		}
		_ = rdb.Process(ctx, cmd)
	}
	return cmd
}
