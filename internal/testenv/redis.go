// Package testenv starts real, throw-away redis-server processes for tests
// and benchmarks: each on a free port on 127.0.0.1, in its own temp
// directory, with persistence off. It never touches a Redis it did not
// start (in particular not the shared one on port 6379).
//
// Servers are killed with SIGKILL on Stop, run in their own process group,
// and on Linux also receive SIGKILL when the process that started them dies,
// so they do not outlive a crashed or timed-out test binary.
//
// The non-test API (StartRedisServer and the *Redis methods that return
// errors) is usable from ordinary programs such as benchmarks. The test API
// (StartRedis, StartReplica, StartSentinel, NewClient, ...) registers
// cleanups on a testing.TB and fails the test on error.
//
// Only the redis-server binary is needed: Sentinel runs as
// "redis-server <conf> --sentinel". On Debian it comes from the
// redis-server package ("make deps" installs it).
//
// SQL servers: StartMariaDB (mariadbd, package mariadb-server) and
// StartPostgres (initdb and postgres, package postgresql) start private
// servers the same way, never the Debian services on ports 3306 and 5432.
// Their data directories are copies of a template initialised once per
// machine and kept in $TMPDIR/dlock-testenv-cache-<uid> (delete it at will);
// each server's own directory (data, socket, log) lives in /dev/shm when
// available ($DLOCK_TESTENV_DIR overrides), and directories left by a
// crashed test binary are removed by the next start. PostgreSQL refuses to
// run as root: as root, initdb and postgres run as the system user postgres
// (or nobody). MainSQL is the TestMain body for packages sharing servers.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// DefaultBinary is the redis-server executable looked up in PATH when
// RedisConfig.Binary is empty. It is a constant; safe for concurrent use.
const DefaultBinary = "redis-server"

// aptHint is appended to "binary not found" errors.
const aptHint = "install the Debian package redis-server (apt-get install -y redis-server) or run `make deps`"

// RedisConfig configures StartRedisServer. The zero value is valid. A
// RedisConfig is a plain value: it is copied by StartRedisServer and may be
// reused or modified afterwards, but must not be modified concurrently with
// a StartRedisServer call that reads it.
type RedisConfig struct {
	// Args are extra redis-server arguments, appended after the defaults
	// (so they override them), e.g. []string{"--maxmemory", "10mb"}.
	Args []string
	// Binary is the redis-server executable: a path, or a name looked up
	// in PATH. Empty means DefaultBinary.
	Binary string
}

// Redis is a redis-server process started by this package, listening on
// 127.0.0.1 on a port that stays the same across Kill and Restart.
//
// All methods are safe for concurrent use. Lifecycle methods (Stop, Kill,
// Restart, Pause, Resume) are serialized; the others connect over the
// network and simply fail (or, for a paused server, block until their
// context ends) while the server is not serving.
type Redis struct {
	proc *process
}

// defaultArgs are passed before RedisConfig.Args. enable-debug-command
// allows DEBUG SLEEP and friends from loopback; the zero diskless-sync
// delay makes replicas sync immediately.
func defaultArgs(port int, dataDir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dataDir,
		"--logfile", "",
		"--daemonize", "no",
		"--repl-diskless-sync-delay", "0",
		"--enable-debug-command", "local",
	}
}

// lookBinary resolves cfg.Binary (or DefaultBinary) to an executable path.
func lookBinary(name string) (string, error) {
	if name == "" {
		name = DefaultBinary
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("testenv: %s not found: %w; %s", name, err, aptHint)
	}
	return path, nil
}

// StartRedisServer starts a redis-server on a free loopback port, with
// --save "" --appendonly no and its own temp directory, and returns once it
// answers PING (that PING shows up in CommandStats until ResetStats). The
// caller must call Stop. Safe for concurrent use.
func StartRedisServer(cfg RedisConfig) (*Redis, error) {
	bin, err := lookBinary(cfg.Binary)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlock-redis-")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	dataDir := filepath.Join(dir, "data")
	extra := append([]string(nil), cfg.Args...)
	argv := func(port int) []string {
		return append(defaultArgs(port, dataDir), extra...)
	}
	// Wiping the data dir before every start guarantees that a Restart
	// comes up empty even if the server wrote an RDB (a replica does on
	// full sync).
	prepare := func() error {
		if err := os.RemoveAll(dataDir); err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		if err := os.Mkdir(dataDir, 0o700); err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		return nil
	}
	p, err := startProcess(bin, dir, argv, prepare)
	if err != nil {
		return nil, err
	}
	return &Redis{proc: p}, nil
}

// Addr returns "127.0.0.1:PORT". The port never changes, not even across
// Kill and Restart. Safe for concurrent use.
func (r *Redis) Addr() string { return r.proc.addr }

// Port returns the TCP port of Addr. Safe for concurrent use.
func (r *Redis) Port() int { return r.proc.port }

// Stop kills the server (SIGKILL to its process group), waits for it to
// exit and removes its temp directory. It is idempotent: later calls return
// nil. After Stop, Kill, Restart, Pause and Resume return an error. Safe for
// concurrent use.
func (r *Redis) Stop() error { return r.proc.stop() }

// Kill crashes the server with SIGKILL and waits for it to exit, keeping
// its port and directory for Restart. Killing a server that is not running
// is a no-op. Safe for concurrent use.
func (r *Redis) Kill() error { return r.proc.kill() }

// Restart starts the server again on the same port, killing it first if it
// is running (or paused), and waits until it answers PING. Nothing is
// persisted, so the restarted server is empty (a replica starts replicating
// again). It retries for a few seconds if the port is still in use. Safe
// for concurrent use.
func (r *Redis) Restart() error { return r.proc.restart() }

// Pause freezes the server with SIGSTOP: connections are still accepted by
// the kernel but no command is answered until Resume. Safe for concurrent
// use.
func (r *Redis) Pause() error {
	r.proc.mu.Lock()
	defer r.proc.mu.Unlock()
	return r.proc.signalLocked(syscall.SIGSTOP)
}

// Resume continues a server frozen by Pause (SIGCONT). Resuming a server
// that is not paused is a no-op. Safe for concurrent use.
func (r *Redis) Resume() error {
	r.proc.mu.Lock()
	defer r.proc.mu.Unlock()
	return r.proc.signalLocked(syscall.SIGCONT)
}

// PID returns the process id of the running server, or 0 while it is
// killed or stopped. Safe for concurrent use.
func (r *Redis) PID() int { return r.proc.pid() }

// Log returns the last few KiB of the server's stdout/stderr (all runs),
// for failure diagnostics; "" after Stop. Safe for concurrent use.
func (r *Redis) Log() string { return r.proc.logTail() }

// CommandStats returns INFO commandstats as lower-case command name ->
// number of calls, e.g. "set", "evalsha", "publish"; subcommands appear as
// "config|resetstat". Redis counts commands run by Lua scripts
// (redis.call) under their own names too. The harness's own traffic is
// counted as well: the startup PING, and one "info" per earlier
// CommandStats call; call ResetStats before measuring. Uses a private
// connection that sends nothing but INFO. Safe for concurrent use.
func (r *Redis) CommandStats(ctx context.Context) (map[string]int64, error) {
	v, err := rawDo(ctx, r.Addr(), "INFO", "commandstats")
	if err != nil {
		return nil, fmt.Errorf("testenv: INFO commandstats: %w", err)
	}
	info, err := replyString(v)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64)
	for name, val := range parseInfo(info) {
		name, ok := strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		for _, field := range strings.Split(val, ",") {
			if calls, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(calls, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("testenv: bad commandstats line %q: %w", val, err)
				}
				out[strings.ToLower(name)] = n
			}
		}
	}
	return out, nil
}

// ResetStats runs CONFIG RESETSTAT, zeroing CommandStats. Afterwards the
// stats show "config|resetstat" with 1 call. Safe for concurrent use.
func (r *Redis) ResetStats(ctx context.Context) error {
	if _, err := rawDo(ctx, r.Addr(), "CONFIG", "RESETSTAT"); err != nil {
		return fmt.Errorf("testenv: CONFIG RESETSTAT: %w", err)
	}
	return nil
}

// Info returns the fields of INFO section (e.g. "replication") as
// name -> value, read over a private connection. Safe for concurrent use.
func (r *Redis) Info(ctx context.Context, section string) (map[string]string, error) {
	v, err := rawDo(ctx, r.Addr(), "INFO", section)
	if err != nil {
		return nil, fmt.Errorf("testenv: INFO %s: %w", section, err)
	}
	s, err := replyString(v)
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

// Do runs one command on a private, short-lived go-redis connection (RESP2,
// no retries, ctx bounds it) and returns go-redis's result: string, int64,
// []any, ...; a nil reply is (nil, redis.Nil). Meant for test assertions
// that must not disturb the client under test; the connection handshake
// adds a "hello" to CommandStats. Safe for concurrent use.
func (r *Redis) Do(ctx context.Context, args ...any) (any, error) {
	return doOnce(ctx, r.Addr(), args...)
}

func doOnce(ctx context.Context, addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaxRetries:               -1,
		PoolSize:                 1,
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	defer c.Close()
	// Returned unwrapped so that err == redis.Nil works.
	return c.Do(ctx, args...).Result()
}

// waitFor polls cond every 20ms until it returns true, returns an error, or
// ctx ends.
func waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("testenv: waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
			}
			return fmt.Errorf("testenv: waiting for %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
