package kind

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A FairMutex's Unlock with a waiter of its own process sends a pass that
// must not be made while another process queues (ARGV[9] = '1'): the lock
// goes to the queue's head through lib.lua's hand_off instead. That hand-off
// costed DEL and HSET of the hash; making the hash the waiter's without
// deleting it (a MIGRATING slot refuses a key the script deleted) must cost
// no more there: HSET and one HDEL of the releaser's field and the leader
// record, which are all a Mutex's hash holds besides the waiter's.
func TestFairPassDeclinedHandOffCost(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := strings.Replace(Source("release.lua"), "--[[lib.lua]]", Source("lib.lua"), 1)
	keys := []string{"{l}", "dlock:fence:{l}", "dlock:queue:{l}", "dlock:forced:{l}"}
	for _, leader := range []bool{false, true} {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, keys[0], "c1:a", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if leader {
			if err := rdb.HSet(ctx, keys[0], "leader", "7 v").Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := rdb.PExpire(ctx, keys[0], time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, keys[1], 7, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.RPush(ctx, keys[2], "1 30000 c2:w").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// A pass from c1:a to c1:b, fair: declined, the lock goes to c2:w.
		v, err := rdb.Eval(ctx, src, keys, "c1:a", 1, 5000, 60000, 7, "0", "c1:b", 30000, "1", 1).Int64()
		if err != nil || v != 0 {
			t.Fatalf("release: %d, %v", v, err)
		}
		stats, err := r.CommandStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for c, k := range stats {
			if c != "eval" && c != "config|resetstat" && c != "config" {
				n += k
			}
		}
		// HGET, LLEN, LPOP, two writes of the hash, PEXPIRE, INCR, PUBLISH.
		if n > 8 {
			t.Errorf("leader %v: the declined pass ran %d commands, more than the 8 it ran before: %v", leader, n, stats)
		}
		h, err := rdb.HGetAll(ctx, keys[0]).Result()
		if err != nil || len(h) != 1 || h["c2:w"] != "1" {
			t.Errorf("leader %v: hash %v, %v; want c2:w alone", leader, h, err)
		}
		if ttl := rdb.PTTL(ctx, keys[0]).Val(); ttl <= 0 || ttl > 5000*time.Millisecond {
			t.Errorf("leader %v: hash TTL %v, want the claim window", leader, ttl)
		}
	}
}
