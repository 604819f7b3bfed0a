package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MariaDBDatabase is the database every server started by StartMariaDB has
// (empty), the one its DSN names. A constant; safe for concurrent use.
const MariaDBDatabase = "dlock"

// mariadbHint is appended to "binary not found" errors.
const mariadbHint = "install the Debian package mariadb-server (apt-get install -y mariadb-server) or run `make deps`"

// mariadbTuning makes a throw-away server start fast and small; used both
// to initialise the template and to run servers. Nothing here weakens what
// the tests look at (locks, sessions): only durability and memory.
var mariadbTuning = []string{
	"--skip-log-bin",
	"--skip-performance-schema",
	"--innodb-buffer-pool-size=16M",
	"--innodb-log-file-size=4M",
	"--innodb-data-file-path=ibdata1:4M:autoextend",
	"--innodb-autoextend-increment=1",
	// 2: the log reaches the OS at each commit but is never fsynced, so a
	// Kill (a process crash) keeps committed data; an OS crash would not.
	"--innodb-flush-log-at-trx-commit=2",
	"--innodb-doublewrite=0",
	"--innodb-flush-method=nosync",
	// The readiness probe reads the greeting and hangs up, which the
	// server counts as a connect error per host; never block 127.0.0.1.
	"--max-connect-errors=1000000",
	"--skip-name-resolve",
}

// MariaDBConfig configures StartMariaDBServer. The zero value is valid. A
// plain value: copied by StartMariaDBServer, may be reused afterwards.
type MariaDBConfig struct {
	// Args are extra mariadbd arguments, appended after the defaults (so
	// they override them), e.g. []string{"--max-connections=20"}.
	Args []string
	// Binary is the mariadbd executable: a path or a name looked up in PATH
	// and the sbin directories. Empty means mariadbd (or mysqld).
	Binary string
}

// MariaDB is a mariadbd process started by this package, listening on
// 127.0.0.1 on a port that stays the same across Kill and Restart, with its
// socket and data in a private temp directory. User root has no password
// (and every privilege, KILL included); database MariaDBDatabase exists.
// Committed data survives Kill and Restart (InnoDB recovers it, as after a
// process crash; nothing is fsynced, so it would not survive an OS crash);
// named locks and sessions do not.
//
// All methods are safe for concurrent use. Lifecycle methods (Stop, Kill,
// Restart, Pause, Resume) are serialized.
type MariaDB struct {
	proc   *process
	socket string
}

// StartMariaDBServer starts a mariadbd on a free loopback port and returns
// once it greets clients. The data directory is a copy of a template made
// once per machine with mariadb-install-db (see the package doc), so a
// start takes about a tenth of a second after the first. The Debian
// service on port 3306 is never used. The caller must call Stop. Safe for
// concurrent use.
func StartMariaDBServer(cfg MariaDBConfig) (*MariaDB, error) {
	names := []string{"mariadbd", "mysqld"}
	if cfg.Binary != "" {
		names = []string{cfg.Binary}
	}
	bin, err := lookDaemon(mariadbHint, names...)
	if err != nil {
		return nil, err
	}
	asRoot := os.Geteuid() == 0
	tmpl, err := mariadbTemplate(bin, asRoot)
	if err != nil {
		return nil, err
	}
	dir, err := serverDir("mariadb")
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "data")
	if err := copyTree(filepath.Join(tmpl, "data"), dataDir, nil); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	socket := filepath.Join(dir, "mysqld.sock")
	extra := append([]string(nil), cfg.Args...)
	argv := func(port int) []string {
		a := []string{
			"--no-defaults", // first: ignore /etc/mysql
			"--datadir=" + dataDir,
			"--tmpdir=" + dir,
			"--port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--socket=" + socket,
			"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		}
		if asRoot {
			a = append(a, "--user=root")
		}
		a = append(a, mariadbTuning...)
		return append(a, extra...)
	}
	p, err := startProcessWith(&process{binary: bin, dir: dir, argv: argv, ready: mysqlGreeting})
	if err != nil {
		return nil, err
	}
	return &MariaDB{proc: p, socket: socket}, nil
}

// mariadbTemplate returns a template directory whose "data" holds a fresh
// mariadb-install-db data directory with database MariaDBDatabase.
func mariadbTemplate(bin string, asRoot bool) (string, error) {
	install, err := lookDaemon(mariadbHint, "mariadb-install-db", "mysql_install_db")
	if err != nil {
		return "", err
	}
	key := append([]string{"mariadb-v1", binaryKey(bin), binaryKey(install), strconv.FormatBool(asRoot)}, mariadbTuning...)
	return cachedTemplate("mariadb", key, nil, func(dir string) error {
		extra := filepath.Join(dir, "init.sql")
		if err := os.WriteFile(extra, []byte("CREATE DATABASE IF NOT EXISTS "+MariaDBDatabase+";\n"), 0o644); err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		args := []string{
			"--no-defaults",
			"--datadir=" + filepath.Join(dir, "data"),
			"--auth-root-authentication-method=normal", // root, no password
			"--skip-test-db",
			"--extra-file=" + extra,
		}
		if asRoot {
			args = append(args, "--user=root")
		}
		args = append(args, mariadbTuning...)
		return runTool(dir, nil, install, args...)
	})
}

// mysqlGreeting connects to addr and reads the server's first packet: a
// handshake (protocol 10) means the server accepts clients.
func mysqlGreeting(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return mysqlGreetingCtx(ctx, addr)
}

func mysqlGreetingCtx(ctx context.Context, addr string) error {
	c, err := dialCtx(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	var hdr [5]byte // 3-byte length, sequence id, first payload byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return err
	}
	if hdr[4] != 10 {
		return fmt.Errorf("testenv: mysql greeting starts with %#x, not protocol 10", hdr[4])
	}
	return nil
}

// dialCtx dials addr; ctx's deadline and cancellation also bound the
// connection's reads and writes until it is closed.
func dialCtx(ctx context.Context, addr string) (*ctxConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	return &ctxConn{Conn: c, stop: stop}, nil
}

// ctxConn is a connection whose I/O ends when its dial context does.
type ctxConn struct {
	net.Conn
	stop func() bool
}

func (c *ctxConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

// Addr returns "127.0.0.1:PORT". The port never changes, not even across
// Kill and Restart. Safe for concurrent use.
func (m *MariaDB) Addr() string { return m.proc.addr }

// Port returns the TCP port of Addr. Safe for concurrent use.
func (m *MariaDB) Port() int { return m.proc.port }

// Socket returns the path of the server's unix socket (in its temp dir).
// Safe for concurrent use.
func (m *MariaDB) Socket() string { return m.socket }

// DSN returns a github.com/go-sql-driver/mysql data source name for user
// root over TCP to Addr, database MariaDBDatabase, followed by params if
// any ("k=v&k2=v2", without the "?"). Safe for concurrent use.
func (m *MariaDB) DSN(params ...string) string {
	dsn := "root@tcp(" + m.Addr() + ")/" + MariaDBDatabase
	if len(params) > 0 {
		dsn += "?" + strings.Join(params, "&")
	}
	return dsn
}

// Stop kills the server (SIGKILL to its process group), waits for it to
// exit and removes its temp directory. Idempotent: later calls return nil.
// After Stop, the lifecycle methods return an error. Safe for concurrent
// use.
func (m *MariaDB) Stop() error { return m.proc.stop() }

// Kill crashes the server with SIGKILL and waits for it to exit, keeping
// its port and data for Restart. Every session ends; killing a server that
// is not running is a no-op. Safe for concurrent use.
func (m *MariaDB) Kill() error { return m.proc.kill() }

// Restart starts the server again on the same port and data directory,
// killing it first if it runs (or is paused), and waits until it greets
// clients. Safe for concurrent use.
func (m *MariaDB) Restart() error { return m.proc.restart() }

// Pause freezes the server with SIGSTOP: the kernel still accepts
// connections, nothing is answered until Resume. Safe for concurrent use.
func (m *MariaDB) Pause() error {
	m.proc.mu.Lock()
	defer m.proc.mu.Unlock()
	return m.proc.signalLocked(syscall.SIGSTOP)
}

// Resume continues a server frozen by Pause (SIGCONT). Safe for concurrent
// use.
func (m *MariaDB) Resume() error {
	m.proc.mu.Lock()
	defer m.proc.mu.Unlock()
	return m.proc.signalLocked(syscall.SIGCONT)
}

// PID returns the process id of the running server, or 0. Safe for
// concurrent use.
func (m *MariaDB) PID() int { return m.proc.pid() }

// Log returns the last few KiB of the server's output (all runs), for
// failure diagnostics. Safe for concurrent use.
func (m *MariaDB) Log() string { return m.proc.logTail() }

// Ready reports whether the server greets a new client now (nil) or why
// not; ctx bounds it. Safe for concurrent use.
func (m *MariaDB) Ready(ctx context.Context) error { return mysqlGreetingCtx(ctx, m.Addr()) }

// StartMariaDB starts a mariadbd like StartMariaDBServer and stops it in
// t.Cleanup (logging its output first if the test failed). Any error,
// including a missing binary, is fatal: nothing is skipped. Call it from
// the test's goroutine; the returned *MariaDB is safe for concurrent use.
func StartMariaDB(t testing.TB, args ...string) *MariaDB {
	t.Helper()
	m, err := StartMariaDBServer(MariaDBConfig{Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: mariadbd %s output:\n%s", m.Addr(), m.Log())
		}
		if err := m.Stop(); err != nil {
			t.Errorf("testenv: stop mariadbd %s: %v", m.Addr(), err)
		}
	})
	return m
}
