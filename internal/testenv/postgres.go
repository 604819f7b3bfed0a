package testenv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PostgresUser and PostgresDatabase are the superuser (no password, trust
// authentication on loopback) and the database of every server started by
// StartPostgres. Constants; safe for concurrent use.
const (
	PostgresUser     = "postgres"
	PostgresDatabase = "postgres"
)

// postgresHint is appended to "binary not found" errors.
const postgresHint = "install the Debian package postgresql (apt-get install -y postgresql) or run `make deps`"

// postgresTuning makes a throw-away server start fast and small. Only
// durability and memory are traded; locks and sessions behave as usual.
var postgresTuning = []string{
	// Commits write the WAL to the OS but never fsync: a Kill (a process
	// crash) keeps committed data, an OS crash would not.
	"-c", "fsync=off",
	"-c", "full_page_writes=off",
	"-c", "shared_buffers=16MB",
	"-c", "max_wal_size=64MB",
	// Dynamic shared memory as files in the data directory: the default
	// (POSIX segments in /dev/shm) would outlive a SIGKILLed server.
	"-c", "dynamic_shared_memory_type=mmap",
}

// PostgresConfig configures StartPostgresServer. The zero value is valid.
// A plain value: copied by StartPostgresServer, may be reused afterwards.
type PostgresConfig struct {
	// Args are extra postgres arguments, appended after the defaults (so
	// they override them), e.g. []string{"-c", "max_connections=20"}.
	Args []string
	// BinDir is the directory holding initdb and postgres. Empty means the
	// directory of the initdb found in PATH (symlinks resolved), else the
	// newest /usr/lib/postgresql/*/bin.
	BinDir string
}

// Postgres is a PostgreSQL server (postgres, initialised by initdb) started
// by this package, listening on 127.0.0.1 on a port that stays the same
// across Kill and Restart, with its unix socket and data in a private temp
// directory. PostgreSQL refuses to run as root, so when the tests run as
// root the server runs as the system user postgres (or nobody), its
// directory chowned to it. User PostgresUser is a superuser without
// password. Committed data survives Kill and Restart (crash recovery, as
// after a process crash; nothing is fsynced); advisory locks and sessions
// do not.
//
// All methods are safe for concurrent use. Lifecycle methods (Stop, Kill,
// Restart, Pause, Resume) are serialized.
type Postgres struct {
	proc    *process
	dataDir string
	uid     int // the server's user, for removeShm
}

// postgresBinDir finds the directory of initdb and postgres.
func postgresBinDir(cfgDir string) (string, error) {
	if cfgDir != "" {
		return cfgDir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dir := filepath.Dir(real)
			if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("testenv: initdb not found in PATH or /usr/lib/postgresql/*/bin; %s", postgresHint)
}

// pgMajor extracts N from /usr/lib/postgresql/N/bin (0 if none).
func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// postgresCredential is whom initdb and postgres run as: nil (ourselves)
// unless we are root, then the system user postgres, else nobody.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return nil, fmt.Errorf("testenv: running as root and neither user postgres nor nobody exists to run PostgreSQL as")
}

// StartPostgresServer starts a PostgreSQL server on a free loopback port
// and returns once it accepts a session. The data directory is a copy of a
// template made once per machine with initdb (see the package doc), so a
// start takes about a tenth of a second after the first. The Debian
// service on port 5432 is never used. The caller must call Stop. Safe for
// concurrent use.
func StartPostgresServer(cfg PostgresConfig) (*Postgres, error) {
	binDir, err := postgresBinDir(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(binDir, "postgres")
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	tmpl, err := postgresTemplate(binDir, cred)
	if err != nil {
		return nil, err
	}
	dir, err := serverDir("postgres")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("testenv: %w", err)
		}
	}
	dataDir := filepath.Join(dir, "data")
	if err := copyTree(filepath.Join(tmpl, "data"), dataDir, cred); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	extra := append([]string(nil), cfg.Args...)
	argv := func(port int) []string {
		a := []string{
			"-D", dataDir,
			"-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + dir,
		}
		a = append(a, postgresTuning...)
		return append(a, extra...)
	}
	uid := os.Geteuid()
	if cred != nil {
		uid = int(cred.Uid)
	}
	// Before a restart: the killed server's interlock segment would leak.
	prepare := func() error { removeShm(dataDir, uid, 0); return nil }
	p, err := startProcessWith(&process{binary: bin, dir: dir, argv: argv, prepare: prepare, ready: pgStartup, cred: cred, tree: true})
	if err != nil {
		return nil, err
	}
	return &Postgres{proc: p, dataDir: dataDir, uid: uid}, nil
}

// postgresTemplate returns a template directory whose "data" holds a fresh
// initdb cluster owned by cred's user.
func postgresTemplate(binDir string, cred *syscall.Credential) (string, error) {
	initdb := filepath.Join(binDir, "initdb")
	owner := "self"
	if cred != nil {
		owner = strconv.FormatUint(uint64(cred.Uid), 10)
	}
	key := []string{"postgres-v1", binaryKey(initdb), binaryKey(filepath.Join(binDir, "postgres")), owner}
	return cachedTemplate("postgres", key, cred, func(dir string) error {
		return runTool(dir, cred, initdb,
			"-D", filepath.Join(dir, "data"),
			"-U", PostgresUser,
			"-A", "trust",
			"-E", "UTF8",
			"--locale=C",
			"--no-sync",
			"--no-instructions",
		)
	})
}

// pgStartup opens a session as PostgresUser (protocol 3.0 startup message)
// and reports nil once the server authenticates it; "the database system is
// starting up" and the like are errors.
func pgStartup(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return pgStartupCtx(ctx, addr)
}

func pgStartupCtx(ctx context.Context, addr string) error {
	c, err := dialCtx(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	var body []byte
	body = binary.BigEndian.AppendUint32(body, 3<<16) // protocol 3.0
	for _, kv := range []string{"user", PostgresUser, "database", PostgresDatabase} {
		body = append(append(body, kv...), 0)
	}
	body = append(body, 0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	if _, err := c.Write(append(msg, body...)); err != nil {
		return err
	}
	var hdr [5]byte // type, int32 length
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
	if n < 0 || n > 1<<16 {
		return fmt.Errorf("testenv: postgres answered a %q message of length %d", hdr[0], n)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(c, payload); err != nil {
		return err
	}
	switch {
	case hdr[0] == 'R' && n >= 4 && binary.BigEndian.Uint32(payload) == 0: // AuthenticationOk
		_, _ = c.Write([]byte{'X', 0, 0, 0, 4}) // Terminate
		return nil
	case hdr[0] == 'E':
		return fmt.Errorf("testenv: postgres: %s", pgErrorText(payload))
	default:
		return fmt.Errorf("testenv: postgres answered a %q message", hdr[0])
	}
}

// pgErrorText returns the message field (M) of an ErrorResponse body.
func pgErrorText(b []byte) string {
	for _, f := range strings.Split(string(b), "\x00") {
		if strings.HasPrefix(f, "M") {
			return f[1:]
		}
	}
	return "unknown error"
}

// Addr returns "127.0.0.1:PORT". The port never changes, not even across
// Kill and Restart. Safe for concurrent use.
func (p *Postgres) Addr() string { return p.proc.addr }

// Port returns the TCP port of Addr. Safe for concurrent use.
func (p *Postgres) Port() int { return p.proc.port }

// SocketDir returns the directory of the server's unix socket (its temp
// dir). Safe for concurrent use.
func (p *Postgres) SocketDir() string { return p.proc.dir }

// DSN returns a URL data source name (github.com/jackc/pgx/v5/stdlib and
// lib/pq read it) for PostgresUser over TCP to Addr, database
// PostgresDatabase, sslmode=disable, followed by params if any ("k=v",
// joined with "&"). Safe for concurrent use.
func (p *Postgres) DSN(params ...string) string {
	return "postgres://" + PostgresUser + "@" + p.Addr() + "/" + PostgresDatabase + "?" +
		strings.Join(append([]string{"sslmode=disable"}, params...), "&")
}

// Stop kills the server (SIGKILL to its process group: postmaster and
// backends), waits for it to exit and removes its temp directory.
// Idempotent: later calls return nil. Safe for concurrent use.
func (p *Postgres) Stop() error {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	if p.proc.stopped {
		return nil
	}
	p.proc.stopped = true
	err := p.proc.killLocked()
	removeShm(p.dataDir, p.uid, 0)
	return errors.Join(err, os.RemoveAll(p.proc.dir))
}

// Kill crashes the server with SIGKILL and waits for it to exit, keeping
// its port and data for Restart. Every session ends. Safe for concurrent
// use.
func (p *Postgres) Kill() error { return p.proc.kill() }

// Restart starts the server again on the same port and data directory
// (after crash recovery), killing it first if it runs or is paused, and
// waits until it accepts a session. Safe for concurrent use.
func (p *Postgres) Restart() error { return p.proc.restart() }

// Pause freezes the postmaster and every backend with SIGSTOP. Safe for
// concurrent use.
func (p *Postgres) Pause() error {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	return p.proc.signalLocked(syscall.SIGSTOP)
}

// Resume continues a server frozen by Pause (SIGCONT). Safe for concurrent
// use.
func (p *Postgres) Resume() error {
	p.proc.mu.Lock()
	defer p.proc.mu.Unlock()
	return p.proc.signalLocked(syscall.SIGCONT)
}

// PID returns the postmaster's process id, or 0. Safe for concurrent use.
func (p *Postgres) PID() int { return p.proc.pid() }

// Log returns the last few KiB of the server's output (all runs). Safe for
// concurrent use.
func (p *Postgres) Log() string { return p.proc.logTail() }

// Ready reports whether the server accepts a new session now (nil) or why
// not; ctx bounds it. Safe for concurrent use.
func (p *Postgres) Ready(ctx context.Context) error { return pgStartupCtx(ctx, p.Addr()) }

// StartPostgres starts a server like StartPostgresServer and stops it in
// t.Cleanup (logging its output first if the test failed). Any error,
// including missing binaries, is fatal: nothing is skipped. Call it from
// the test's goroutine; the returned *Postgres is safe for concurrent use.
func StartPostgres(t testing.TB, args ...string) *Postgres {
	t.Helper()
	p, err := StartPostgresServer(PostgresConfig{Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: postgres %s output:\n%s", p.Addr(), p.Log())
		}
		if err := p.Stop(); err != nil {
			t.Errorf("testenv: stop postgres %s: %v", p.Addr(), err)
		}
	})
	return p
}
