package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlock-dev/dlock/internal/testenv"
	"github.com/dlock-dev/dlock/sqllock"
)

// The package's shared servers, for tests that do not kill, pause or
// restart them; those start their own. Tests run one at a time (no
// t.Parallel): several count the server's sessions.
var (
	sharedMy *testenv.MariaDB
	sharedPG *testenv.Postgres
)

func TestMain(m *testing.M) {
	// The driver logs connections that tests kill on purpose.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	os.Exit(testenv.MainSQL(m, "sqllock", &sharedMy, &sharedPG, checkServers))
}

// checkServers runs after all tests: every test closed its pools, so no
// session but the checker's own may remain (the server notices closed
// connections quickly; allow a few seconds) and no lock may be held.
func checkServers() error {
	for _, b := range backends() {
		if err := b.checkClean(); err != nil {
			return fmt.Errorf("%s after the tests: %w", b.name, err)
		}
	}
	return nil
}

// backend is what the tests need to know about one database family.
type backend struct {
	name   string // the Locker's Backend
	driver string
	dsn    func() string
	locker func(*sql.DB, ...sqllock.Option) (*sqllock.Locker, error)
	// sessionsQuery counts the server's client sessions other than the
	// asking one.
	sessionsQuery string
	// holderQuery returns the session id holding name's lock (no row or
	// NULL when free); killQuery ends a session by id.
	holderQuery func(name string) (string, []any)
	killQuery   string
	// nowMicros is the server clock in microseconds.
	nowMicros string
	// waitersQuery counts sessions blocked waiting for a named lock.
	waitersQuery string
}

func backends() []backend {
	return []backend{
		{
			name:          "mysql",
			driver:        "mysql",
			dsn:           func() string { return sharedMy.DSN() },
			locker:        sqllock.MySQL,
			sessionsQuery: "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Daemon' AND USER <> 'system user'",
			holderQuery: func(name string) (string, []any) {
				return "SELECT IS_USED_LOCK(?)", []any{sqllock.MySQLLockName(name)}
			},
			killQuery:    "KILL CONNECTION %d",
			nowMicros:    "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
			waitersQuery: "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT GET_LOCK(%'",
		},
		{
			name:          "postgres",
			driver:        "pgx",
			dsn:           func() string { return sharedPG.DSN() },
			locker:        sqllock.Postgres,
			sessionsQuery: "SELECT COUNT(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
			holderQuery: func(name string) (string, []any) {
				k := uint64(sqllock.PGLockKey(name))
				return "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1 LIMIT 1",
					[]any{int64(k >> 32), int64(k & 0xffffffff)}
			},
			killQuery:    "SELECT pg_terminate_backend(%d)",
			nowMicros:    "SELECT (extract(epoch from clock_timestamp()) * 1000000)::bigint",
			waitersQuery: "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'",
		},
	}
}

// each runs f as a subtest per backend.
func each(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// open returns a pool on the backend's shared server, closed when the test
// ends (after the Lockers made on it: cleanups run last-in first-out).
func (b backend) open(t testing.TB) *sql.DB {
	t.Helper()
	return b.openDSN(t, b.dsn())
}

func (b backend) openDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(b.driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newLocker returns a Locker on db, closed when the test ends; the test
// fails if the Locker leaves a session in use.
func (b backend) newLocker(t testing.TB, db *sql.DB, opts ...sqllock.Option) *sqllock.Locker {
	t.Helper()
	l, err := b.locker(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := db.Stats().InUse; n != 0 {
			t.Errorf("%d sessions still in use after Close", n)
		}
	})
	return l
}

// holder returns the id of the session holding name, or 0 when it is free.
func (b backend) holder(t testing.TB, admin *sql.DB, name string) int64 {
	t.Helper()
	q, args := b.holderQuery(name)
	var id sql.NullInt64
	err := admin.QueryRowContext(ctxT(t, 5*time.Second), q, args...).Scan(&id)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return id.Int64
}

// kill ends the server session id the way an operator would.
func (b backend) kill(t testing.TB, admin *sql.DB, id int64) {
	t.Helper()
	if _, err := admin.ExecContext(ctxT(t, 5*time.Second), fmt.Sprintf(b.killQuery, id)); err != nil {
		t.Fatal(err)
	}
}

// nowMicros returns the server's clock in microseconds.
func (b backend) now(t testing.TB, admin *sql.DB) int64 {
	t.Helper()
	var us int64
	if err := admin.QueryRowContext(ctxT(t, 5*time.Second), b.nowMicros).Scan(&us); err != nil {
		t.Fatal(err)
	}
	return us
}

// checkClean waits (a few seconds at most) until the server has no session
// but the checker's and, for PostgreSQL, no advisory lock.
func (b backend) checkClean() error {
	db, err := sql.Open(b.driver, b.dsn())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n, locks int
	for {
		err := db.QueryRowContext(ctx, b.sessionsQuery).Scan(&n)
		if err == nil && b.name == "postgres" {
			err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&locks)
		}
		if err == nil && n == 0 && locks == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d other sessions, %d advisory locks (last error %v)", n, locks, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 20ms until it holds, failing the test after
// d (a generous bound, not a speed assertion).
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFree waits until name's lock is free on the server.
func (b backend) waitFree(t testing.TB, admin *sql.DB, name string) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%s lock %q free", b.name, name), func() bool { return b.holder(t, admin, name) == 0 })
}

// waiters returns how many sessions wait for a named lock on the server.
func (b backend) waiters(t testing.TB, admin *sql.DB) int {
	t.Helper()
	var n int
	if err := admin.QueryRowContext(ctxT(t, 5*time.Second), b.waitersQuery).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
