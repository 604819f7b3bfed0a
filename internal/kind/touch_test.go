package kind

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Touch vouches only for the hold it names. After a failover the new
// primary may have the key held by an older owner while our grant never
// reached it; a touch that looked at the key alone answered 1 there, WAIT
// counted the demoted primary as a replica, and the grant (with a fencing
// token the new primary never issued) was confirmed.
func TestTouchFindsTheHoldNotTheKey(t *testing.T) {
	rdb := testenv.StartRedis(t).NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rdb.HSet(ctx, "lock", "c1:1", 1).Err())
	must(rdb.PExpire(ctx, "lock", time.Minute).Err())
	must(rdb.Do(ctx, "zadd", "permits", 1, "c1:2").Err())
	must(rdb.PExpire(ctx, "permits", time.Minute).Err())
	must(rdb.Set(ctx, "str", "x", time.Minute).Err())
	must(rdb.HSet(ctx, "nottl", "c1:3", 1).Err())

	for _, c := range []struct {
		key, field string
		want       int64
	}{
		{"lock", "c1:1", 1},
		{"lock", "c2:1", 0}, // the key is held, by someone else
		{"permits", "c1:2", 1},
		{"permits", "c2:2", 0},
		{"missing", "c1:1", 0},
		{"str", "x", 0},
		{"nottl", "c1:3", 0}, // no TTL: not a hold dlock made
	} {
		got, err := Touch.Eval(ctx, rdb, []string{c.key}, c.field).Int64()
		if err != nil {
			t.Fatalf("touch %s %s: %v", c.key, c.field, err)
		}
		if got != c.want {
			t.Errorf("touch %s %s = %d, want %d", c.key, c.field, got, c.want)
		}
	}
	// The touch is a write that changes nothing: the TTL stays.
	if ttl := rdb.PTTL(ctx, "lock").Val(); ttl < 50*time.Second {
		t.Errorf("the touched lock's TTL is %v, want about a minute", ttl)
	}
	if n := rdb.PTTL(ctx, "nottl").Val(); n != -1 {
		t.Errorf("a key without TTL got one: %v", n)
	}
}
