// Package kind holds dlock's kinds of lease: the mutex (fair or not), the
// read and write sides of a read-write lock, the semaphore and the
// election. Each is one file beside its Lua scripts and implements
// lease.Protocol: the scripts it runs, their typed arguments, and its
// replies decoded in one place. The count-down latch, which is not a
// lease, is one file beside its scripts too. Every script of dlock is
// embedded here and nowhere else.
package kind

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/renew"
	"github.com/dlock-dev/dlock/internal/wire"
)

var (
	//go:embed migrating.lua
	luaMigrating string
	//go:embed lib.lua
	luaLibOwn string
	// luaLib is what the Mutex's, the read-write lock's and the renewal's
	// scripts are given: the migration helpers, then lib.lua.
	luaLib = luaMigrating + luaLibOwn
	//go:embed renew.lua
	luaRenew string

	scriptRenew = script(wire.WithLib(luaLib, luaRenew))

	//go:embed touch.lua
	luaTouch string

	//go:embed read.lua
	luaRead string

	// PrimaryRead runs one HEXISTS or GET on the primary, for a Wire whose client
	// sends bare reads to replicas (wire.Wire.ReadsReplicas).
	PrimaryRead = wire.NewScript(luaRead)

	// Touch proves that one hold (KEYS[1], field ARGV[1]) is on the node
	// with a write that enters the replication stream after its grant (for
	// replica acknowledgements): 1 when it is there, 0 when not.
	Touch = wire.NewScript(luaTouch)
)

// Renewer returns the renewal of the Space's leases: one call of renew.lua
// renews a batch of any kinds, giving each the TTL in ttls (ms), and
// returns a code per lease: renew.Held, or why the owner's field is missing
// (lease.CodeGone, ...). fenceTTL is the fencing counters' TTL, with which
// why_gone tells a sequence that ended by its TTL from a data loss.
func Renewer(space keys.Space, fenceTTL time.Duration) func(ctx context.Context, w *wire.Wire, batch []*renew.Entry, ttls []int64) ([]int64, error) {
	fenceTTLMs := fenceTTL.Milliseconds()
	return func(ctx context.Context, w *wire.Wire, batch []*renew.Entry, ttls []int64) ([]int64, error) {
		return renewBatch(ctx, w, space, fenceTTLMs, batch, ttls)
	}
}

func renewBatch(ctx context.Context, w *wire.Wire, space keys.Space, fenceTTLMs int64, batch []*renew.Entry, ttls []int64) ([]int64, error) {
	keyArgs := make([]any, 0, 5*len(batch))
	args := make([]any, 5*len(batch), 5*len(batch)+1)
	n := len(batch)
	for i, e := range batch {
		set, fence, forced, held := e.Set, e.Fence, e.Forced, e.Key
		if set == "" {
			set = e.Key
		}
		if fence == "" {
			// A permit uses neither a fencing counter, a forced set nor a
			// record of long holds (its expiry is in its set).
			fence, forced = e.Key, set
		} else {
			held = space.Held(e.Key)
		}
		rec := ""
		if held != e.Key && e.Since > 0 && !e.Hurried && e.Renewals%keys.HeldEvery == 0 {
			rec = keys.HeldRecord(e.Since, ttls[i]/renew.PerTTL)
		}
		keyArgs = append(keyArgs, e.Key, set, fence, forced, held)
		var tok any = ""
		if e.Token != 0 {
			tok = e.Token
		}
		args[i], args[n+i], args[2*n+i], args[3*n+i], args[4*n+i] = e.Field, ttls[i], string(e.Kind), rec, tok
	}
	args = append(args, fenceTTLMs)
	res, err := scriptRenew.RunDroppable(ctx, w, keyArgs, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != n {
		return nil, fmt.Errorf("dlock: renew returned %d results for %d locks", len(res), n)
	}
	return res, nil
}

// ints reads a script's reply of at most len(buf) integers into buf.
func ints(cmd *redis.Cmd, buf []int64) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) > len(buf) {
		return nil, fmt.Errorf("dlock: unexpected script reply %v", v)
	}
	for i, x := range arr {
		n, ok := x.(int64)
		if !ok {
			return nil, fmt.Errorf("dlock: unexpected script reply %v", v)
		}
		buf[i] = n
	}
	return buf[:len(arr)], nil
}

func flag(b bool) any {
	if b {
		return "1"
	}
	return "0"
}

// Source returns the embedded Lua file by its name ("acquire.lua"), as the
// tests that hold the scripts and the Go side together read it; "" for an
// unknown name. A library ("lib.lua", "sem_lib.lua") comes as the scripts
// are given it: after migrating.lua, which it builds on.
func Source(file string) string {
	return map[string]string{
		"migrating.lua": luaMigrating, "lib.lua": luaLib, "renew.lua": luaRenew,
		"acquire.lua": luaAcquire, "release.lua": luaRelease, "leave.lua": luaLeave, "force.lua": luaForce,
		"rwlib.lua": luaRWLib, "rwlock.lua": luaRWLock, "rlock.lua": luaRLock, "rwunlock.lua": luaRWUnlock, "rwleave.lua": luaRWLeave,
		"sem_lib.lua": luaSem, "sem_acquire.lua": luaSemAcquire, "sem_release.lua": luaSemRelease, "sem_leave.lua": luaSemLeave,
		"sem_resize.lua": luaSemResize, "sem_available.lua": luaSemAvailable,
		"election_announce.lua": luaAnnounce, "latch_set.lua": luaLatchSet, "latch_down.lua": luaLatchDown,
	}[file]
}

// script returns the script of src with its variants (wire.Variant): under
// a namespace every channel it builds begins with the namespace, and in
// sharded pub/sub mode every message is an SPUBLISH (shardLua's spublish)
// on the channel keys.ShardChannel names for KEYS[1], which keeps it in the
// shard of the script's keys; a hand-off goes to the waiter's client channel
// of the lock's slot (keys.Space.ShardClientChannel), which shard_client
// builds from KEYS[1].
func script(src string) *wire.Script {
	return wire.NewScript(src).WithVariants(func(v wire.Variant) string { return adapt(src, v) })
}

// adapt is script's variant v of src.
func adapt(src string, v wire.Variant) string {
	out := src
	if v.Namespace != "" {
		out = strings.ReplaceAll(out, "'redisson_", "'"+v.Namespace+"redisson_")
		out = strings.ReplaceAll(out, "'"+keys.ClientChannelPrefix, "'"+v.Namespace+keys.ClientChannelPrefix)
	}
	if v.Sharded {
		out = strings.ReplaceAll(out, "redis.pcall('publish', ", "spublish(")
		out = strings.ReplaceAll(out, "'"+v.Namespace+keys.ClientChannelPrefix+"' .. ", "shard_client() .. ")
		out = shardLua(v.Namespace) + out
	}
	return out
}

// shardLua defines the functions the sharded variant of a script begins
// with, under the namespace ns ("ns:" or ""):
//
//   - hashed(k) is keys.Hashed: the part of k that Redis Cluster hashes.
//   - shard_client() is the prefix of this script's client channels in the
//     slot of KEYS[1], "dlock:client:{<hashed>}:" (keys.ShardClientChannel).
//   - shard_channel(channel) is keys.Space.ShardChannel of channel and
//     KEYS[1]: the channel itself when it is in KEYS[1]'s slot, else its
//     stand-in there.
//   - spublish(channel, msg) publishes msg with SPUBLISH on
//     shard_channel(channel). Every script publishes through it, with
//     pcall (a user whose ACL denies SPUBLISH still locks and unlocks, see
//     lib.lua's publish).
func shardLua(ns string) string {
	return `local function hashed(k)
  local s = string.find(k, '{', 1, true)
  local e = s and string.find(k, '}', s + 1, true)
  if e and e > s + 1 then return string.sub(k, s + 1, e - 1) end
  return k
end
local function shard_client()
  return '` + ns + keys.ClientChannelPrefix + `{' .. hashed(KEYS[1]) .. '}:'
end
local function shard_channel(channel)
  local h = hashed(KEYS[1])
  if hashed(channel) == h then return channel end
  return '` + ns + keys.ShardChannelPrefix + `{' .. h .. '}:' .. channel
end
local function spublish(channel, msg)
  return redis.pcall('spublish', shard_channel(channel), msg)
end
`
}

// modeChannel is ch, a channel whose messages are about key (the first key
// of the scripts that publish on it), as e's pub/sub mode names it:
// keys.Space.ShardChannel in sharded mode, ch itself otherwise.
func modeChannel(e *lease.Engine, ch, key string) string {
	if e.Cfg.Sharded != nil {
		return e.Cfg.Space.ShardChannel(ch, key)
	}
	return ch
}
