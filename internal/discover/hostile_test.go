package discover

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A neighbour who turns keys from hashes into strings and back (DEL, then
// SET or HSET) while a discovery runs must not make it fail: a key that
// was a hash at the SCAN and is a string at the HRANDFIELD is not a lock,
// it is no reason to lose the whole listing (the dashboard's, Client.Locks').
func TestRunSurvivesKeysChangingType(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rdb.HSet(ctx, "job", "host/1/abc:1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	const n = 64
	flip := `for i = 1, #KEYS do
  local t = redis.call('TYPE', KEYS[i]).ok
  redis.call('DEL', KEYS[i])
  if t == 'hash' then redis.call('SET', KEYS[i], 'x') else redis.call('HSET', KEYS[i], 'f', 'v') end
end`
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "flip:" + strconv.Itoa(i)
	}
	nb := r.NewClient(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = nb.Eval(ctx, flip, ks).Err()
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < 300; i++ {
		f, err := Run(ctx, rdb, Options{})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if !f.Held["job"] {
			t.Fatalf("run %d: the lock job was not found: %v", i, f.Held)
		}
	}
}
