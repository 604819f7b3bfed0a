package demo

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func check(t *testing.T, r Result, cfg Config) {
	t.Helper()
	if r.Stock != cfg.Stock || r.Requests != cfg.Requests || r.Errors != 0 {
		t.Fatalf("%+v", r)
	}
	if cfg.NoLock {
		if r.Oversold == 0 {
			t.Fatalf("no oversell without the lock: %+v", r)
		}
		return
	}
	if r.Oversold != 0 || r.Issued != cfg.Stock || r.Rejected != cfg.Requests-cfg.Stock || r.TimedOut != 0 {
		t.Fatalf("with the lock: %+v", r)
	}
	if r.WaitP50 <= 0 || r.WaitP99 < r.WaitP50 || r.CommandsPerIssue() < 4 {
		t.Fatalf("stats: %+v", r)
	}
}

func TestEmbedded(t *testing.T) {
	for _, mode := range []string{"lock", "no-lock", "fair"} {
		cfg := Config{Servers: 2, Workers: 4, Stock: 30, Requests: 60, NoLock: mode == "no-lock", Fair: mode == "fair"}
		var progress atomic.Int64
		// Workers report concurrently, so the calls may come out of order:
		// the highest count seen is the one that must reach 60.
		cfg.Progress = func(n int) {
			for p := progress.Load(); int64(n) > p && !progress.CompareAndSwap(p, int64(n)); p = progress.Load() {
			}
		}
		r, err := Run(ctxT(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		check(t, r, cfg)
		if progress.Load() != 60 || r.Backend != "embedded" || r.ServerCommands != -1 {
			t.Fatalf("progress %d, %+v", progress.Load(), r)
		}
	}
}

func TestRealRedis(t *testing.T) {
	rs := testenv.StartRedis(t)
	for _, mode := range []string{"lock", "no-lock", "fair"} {
		cfg := Config{Servers: 3, Workers: 4, Stock: 40, Requests: 80, NoLock: mode == "no-lock", Fair: mode == "fair", Redis: &redis.Options{Addr: rs.Addr()}}
		r, err := Run(ctxT(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		check(t, r, cfg)
		if r.ServerCommands < r.CommandsSent {
			t.Fatalf("server counted %d commands, clients sent %d", r.ServerCommands, r.CommandsSent)
		}
	}
	if n, err := rs.Do(ctxT(t), "DBSIZE"); err != nil || n.(int64) != 0 {
		t.Fatalf("keys left: %v %v", n, err)
	}
}

// The embedded Redis's clock follows real time: a lease expires on time and
// the watchdog keeps a held lock alive past its TTL.
func TestEmbeddedClock(t *testing.T) {
	e, err := StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rdb := redis.NewClient(Options(e.Addr()))
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithWatchdogTimeout(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)

	lease := c.Mutex("clock-lease")
	if ok, err := lease.TryLock(ctx, 0, 100*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	time.Sleep(250 * time.Millisecond)
	if n := rdb.Exists(ctx, "clock-lease").Val(); n != 0 {
		t.Fatal("a 100ms lease still exists after 250ms")
	}

	wd := c.Mutex("clock-watchdog")
	if err := wd.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := rdb.Exists(ctx, "clock-watchdog").Val(); n != 1 || wd.Err() != nil {
		t.Fatalf("watchdog lock gone after 1s (TTL 400ms): exists %d, err %v", n, wd.Err())
	}
	// A waiter in another client is woken by the release (pub/sub from Lua).
	rdb2 := redis.NewClient(Options(e.Addr()))
	defer rdb2.Close()
	c2, err := dlock.New(rdb2)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	got := make(chan error, 1)
	go func() {
		m := c2.Mutex("clock-watchdog")
		ok, err := m.TryLock(ctx, 5*time.Second, 0)
		if err == nil && !ok {
			err = errors.New("not acquired")
		}
		if err == nil {
			err = m.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := wd.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("hand-off took %v", d)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{{Servers: -1}, {Workers: -2}, {Stock: -1}, {Requests: -1}, {Think: -time.Second}, {Fair: true, NoLock: true}} {
		if err := c.Validate(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	var c Config
	if err := c.Validate(); err != nil || c.Servers != DefaultServers || c.Requests != DefaultRequests {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := Config{Requests: 100000, Stock: 100000, Think: time.Millisecond}
	cfg.Progress = func(n int) {
		if n == 50 {
			cancel()
		}
	}
	if _, err := Run(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatal(fmt.Sprint(err))
	}
}
