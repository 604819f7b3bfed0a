package dlock

import (
	_ "embed"

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

	scriptAcquire = redis.NewScript(luaLib + luaAcquire)
	scriptRelease = redis.NewScript(luaLib + luaRelease)
	scriptLeave   = redis.NewScript(luaLib + luaLeave)
	scriptForce   = redis.NewScript(luaLib + luaForce)
	scriptRenew   = redis.NewScript(luaRenew)
)
