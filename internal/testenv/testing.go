package testenv

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// setupTimeout bounds the waits done by StartReplica and StartSentinel.
const setupTimeout = 30 * time.Second

// Option adjusts the RedisConfig used by StartRedis and StartReplica. An
// Option is a pure function value; safe for concurrent use.
type Option func(*RedisConfig)

// WithArgs appends extra redis-server arguments (they override the
// defaults), e.g. WithArgs("--maxmemory", "10mb"). Safe for concurrent use.
func WithArgs(args ...string) Option {
	args = append([]string(nil), args...)
	return func(c *RedisConfig) { c.Args = append(c.Args, args...) }
}

// WithBinary sets the redis-server executable (path or name in PATH).
// Safe for concurrent use.
func WithBinary(binary string) Option {
	return func(c *RedisConfig) { c.Binary = binary }
}

// StartRedis starts a redis-server like StartRedisServer and stops it in
// t.Cleanup (logging its output first if the test failed). Any error,
// including a missing redis-server binary, is fatal: nothing is skipped.
// Must be called from the test's goroutine (it may call t.Fatal); the
// returned *Redis is safe for concurrent use.
func StartRedis(t testing.TB, opts ...Option) *Redis {
	t.Helper()
	var cfg RedisConfig
	for _, o := range opts {
		o(&cfg)
	}
	r, err := StartRedisServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: redis-server %s output:\n%s", r.Addr(), r.Log())
		}
		if err := r.Stop(); err != nil {
			t.Errorf("testenv: stop redis-server %s: %v", r.Addr(), err)
		}
	})
	return r
}

// NewClient returns a go-redis client (default options, maintenance
// notifications off) for r, closed in t.Cleanup. It stays usable across
// Kill/Restart (go-redis reconnects). Call it from the test's goroutine;
// the client is safe for concurrent use.
func (r *Redis) NewClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                     r.Addr(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartReplica starts a redis-server replicating master (--replicaof), with
// the master's binary unless opts say otherwise, and waits until the
// replication link is up (the replica holds the master's data). Stopped in
// t.Cleanup. A replica Restart()ed resyncs from the same master; after a
// Sentinel failover it follows whatever Sentinel told it. Call from the
// test's goroutine; the returned *Redis is safe for concurrent use.
func StartReplica(t testing.TB, master *Redis, opts ...Option) *Redis {
	t.Helper()
	host, port, _ := net.SplitHostPort(master.Addr())
	all := append([]Option{WithBinary(master.proc.binary), WithArgs("--replicaof", host, port)}, opts...)
	r := StartRedis(t, all...)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	err := waitFor(ctx, "replication link", func() (bool, error) {
		info, err := r.Info(ctx, "replication")
		if err != nil {
			return false, err
		}
		if s := info["master_link_status"]; s != "up" {
			return false, fmt.Errorf("master_link_status %q", s)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("testenv: replica %s of %s: %v", r.Addr(), master.Addr(), err)
	}
	return r
}

// StartSentinel starts a Sentinel (the master's redis-server binary with
// --sentinel) monitoring master as MasterName, quorum 1,
// down-after-milliseconds 1000, failover-timeout 5000, on a free loopback
// port, and stops it in t.Cleanup. It returns once the sentinel is
// connected to the master and to every replica the master has at that
// moment, so start replicas (StartReplica) first: a replica started later
// is discovered only by Sentinel's next INFO poll (up to 10s). Call from
// the test's goroutine; the returned *Sentinel is safe for concurrent use.
func StartSentinel(t testing.TB, master *Redis) *Sentinel {
	t.Helper()
	s, err := startSentinelServer(master.proc.binary, master)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: sentinel %s output:\n%s", s.Addr(), s.Log())
		}
		if err := s.Stop(); err != nil {
			t.Errorf("testenv: stop sentinel %s: %v", s.Addr(), err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := s.waitSynced(ctx, master); err != nil {
		t.Fatalf("testenv: sentinel %s: %v\n%s", s.Addr(), err, s.Log())
	}
	return s
}

// NewFailoverClient returns a go-redis Sentinel-backed client for
// MasterName via s, closed in t.Cleanup. Call from the test's goroutine;
// the client is safe for concurrent use.
func (s *Sentinel) NewFailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    MasterName,
		SentinelAddrs: []string{s.Addr()},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
