package kind

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
	"github.com/dlock-dev/dlock/internal/wire"
)

// The sharded scripts name the channels they publish on as the Go side
// names those its waiters listen on: shard_channel (Lua) is
// keys.Space.ShardChannel for every kind's channel, hostile names and
// namespaces included.
func TestShardChannelLuaMatchesKeys(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := keys.NewSpace("ns")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a{b", "{", "x{y:z", "{t}x", "a{b}c", "{t}", "{{t}}", "a{b{c", "plain", "user:{42}:lock", "{ключ}x"}
	for _, s := range []keys.Space{{}, ns} {
		eval := wire.NewScript(shardLua(s.Prefix()) + "return shard_channel(ARGV[1])")
		for _, name := range names {
			set, latch, sem, el := s.For(name), s.Latch(name), s.Semaphore(name), s.Election(name)
			for _, c := range [][2]string{
				{set.Channel, set.Lock}, {set.RWChannel, set.Lock}, {latch.Channel, latch.Count},
				{sem.Free, sem.Permits}, {el.Changes, el.Lock},
				{s.ShardClientChannel("c1", set.Lock), set.Lock},
			} {
				got, err := eval.Eval(ctx, rdb, []string{c[1]}, c[0]).Text()
				if err != nil {
					t.Fatal(err)
				}
				if want := s.ShardChannel(c[0], c[1]); got != want {
					t.Errorf("ns %q: shard_channel(%q) with KEYS[1] %q = %q, keys.ShardChannel says %q", s.Prefix(), c[0], c[1], got, want)
				}
			}
		}
	}
}

// Every script's sharded variant publishes through spublish only: no
// classic PUBLISH, and no SPUBLISH that skips shard_channel.
func TestShardedVariantsUseSpublish(t *testing.T) {
	for _, file := range []string{
		"lib.lua", "release.lua", "force.lua", "rwunlock.lua", "rwleave.lua",
		"sem_lib.lua", "sem_release.lua", "election_announce.lua", "latch_set.lua", "latch_down.lua",
	} {
		src := Source(file)
		if !strings.Contains(src, "redis.pcall('publish', ") && !strings.Contains(src, "publish(") {
			t.Errorf("%s publishes nothing: the list is stale", file)
		}
		for _, v := range []wire.Variant{{Sharded: true}, {Sharded: true, Namespace: "ns:"}} {
			out := adapt(src, v)
			body := strings.TrimPrefix(out, shardLua(v.Namespace))
			if strings.Contains(body, "'publish'") || strings.Contains(body, "'spublish'") {
				t.Errorf("%s, variant %+v: publishes other than through spublish", file, v)
			}
		}
	}
}
