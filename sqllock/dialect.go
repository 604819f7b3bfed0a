package sqllock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// session identifies a database session so that another session can end it:
// MySQL's connection id (start unused), or PostgreSQL's backend pid and
// backend start time in microseconds (a pid can be reused, the pair not).
type session struct {
	id    int64
	start int64
}

// dialect is the SQL of one database family. Every method runs on the
// session it is given, except kill, which runs on a fresh pooled one.
type dialect interface {
	backend() string
	// key maps a dlock name to the database's lock key (and fence row key).
	key(name string) any
	createTable(table string) string
	probeTable(table string) string
	sessionQuery() string
	// lock takes the lock, waiting up to wait (0: one attempt); false
	// means the wait ran out.
	lock(ctx context.Context, c *sql.Conn, key any, wait time.Duration, shared bool) (bool, error)
	// fence raises the name's token to at least min and to the database
	// clock in microseconds, at least one past its last value, and returns
	// it.
	fence(ctx context.Context, c *sql.Conn, table string, key any, min int64) (int64, error)
	// check reports whether the session still holds the lock.
	check(ctx context.Context, c *sql.Conn, key any) (bool, error)
	// unlock releases the lock; false means the session did not hold it.
	unlock(ctx context.Context, c *sql.Conn, key any, shared bool) (bool, error)
	kill(ctx context.Context, db *sql.DB, s session) error
}

// mysqlName maps a dlock name to a MySQL user-level lock name: "dlock:" and
// the first 58 hex digits (232 bits) of the name's SHA-256, 64 characters
// in all (MySQL's limit), lower-case only, so that neither the length limit
// nor the server's case rules (MySQL compares lock names
// case-insensitively) can merge two names.
func mysqlName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "dlock:" + hex.EncodeToString(sum[:])[:58]
}

// pgKey maps a dlock name to a PostgreSQL advisory lock key: the first 8
// bytes of the name's SHA-256 as a big-endian int64.
func pgKey(name string) int64 {
	sum := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// mysqlDialect: MySQL 8 and MariaDB 10.x user-level locks (GET_LOCK).
type mysqlDialect struct{}

// mysqlNowMicros is the server's UTC clock in microseconds since the epoch,
// computed without the session time zone.
const mysqlNowMicros = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"

func (mysqlDialect) backend() string     { return "mysql" }
func (mysqlDialect) key(name string) any { return mysqlName(name) }

func (mysqlDialect) createTable(t string) string {
	return "CREATE TABLE IF NOT EXISTS " + t + " (name_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB"
}

func (mysqlDialect) probeTable(t string) string { return "SELECT token FROM " + t + " WHERE 1 = 0" }

func (mysqlDialect) sessionQuery() string { return "SELECT CONNECTION_ID(), 0" }

func (mysqlDialect) lock(ctx context.Context, c *sql.Conn, key any, wait time.Duration, _ bool) (bool, error) {
	// GET_LOCK's timeout is in seconds; MariaDB honours fractions (to the
	// microsecond), MySQL 8 too.
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", key, wait.Seconds()).Scan(&got); err != nil {
		return false, err
	}
	if !got.Valid {
		return false, errors.New("GET_LOCK returned NULL (session killed or out of memory)")
	}
	return got.Int64 == 1, nil
}

func (mysqlDialect) fence(ctx context.Context, c *sql.Conn, t string, key any, min int64) (int64, error) {
	// LAST_INSERT_ID(expr) hands the row's new token back in the OK
	// packet, so one round trip suffices on both paths (insert, update).
	res, err := c.ExecContext(ctx, "INSERT INTO "+t+" (name_key, token) VALUES (?, LAST_INSERT_ID(GREATEST(?, "+mysqlNowMicros+"))) "+
		"ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(GREATEST(token + 1, ?, "+mysqlNowMicros+"))", key, min, min)
	if err != nil {
		return 0, err
	}
	tok, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	if tok <= 0 {
		return 0, fmt.Errorf("fence table %s returned token %d", t, tok)
	}
	return tok, nil
}

func (mysqlDialect) check(ctx context.Context, c *sql.Conn, key any) (bool, error) {
	var mine sql.NullInt64
	if err := c.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", key).Scan(&mine); err != nil {
		return false, err
	}
	return mine.Valid && mine.Int64 == 1, nil
}

func (mysqlDialect) unlock(ctx context.Context, c *sql.Conn, key any, _ bool) (bool, error) {
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", key).Scan(&got); err != nil {
		return false, err
	}
	return got.Valid && got.Int64 == 1, nil
}

func (mysqlDialect) kill(ctx context.Context, db *sql.DB, s session) error {
	// The id comes from the server; KILL does not take placeholders
	// everywhere. Connection ids are not reused while the server runs.
	_, err := db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(s.id, 10))
	if err != nil && strings.Contains(err.Error(), "1094") { // ER_NO_SUCH_THREAD: already gone
		return nil
	}
	return err
}

// pgDialect: PostgreSQL session-level advisory locks.
type pgDialect struct{}

const pgNowMicros = "(extract(epoch from clock_timestamp()) * 1000000)::bigint"

func (pgDialect) backend() string     { return "postgres" }
func (pgDialect) key(name string) any { return pgKey(name) }

func (pgDialect) createTable(t string) string {
	return "CREATE TABLE IF NOT EXISTS " + t + " (name_key bigint PRIMARY KEY, token bigint NOT NULL)"
}

func (pgDialect) probeTable(t string) string { return "SELECT token FROM " + t + " WHERE false" }

func (pgDialect) sessionQuery() string {
	return "SELECT pid, (extract(epoch from backend_start) * 1000000)::bigint FROM pg_stat_activity WHERE pid = pg_backend_pid()"
}

// maxLockTimeout is the largest lock_timeout PostgreSQL accepts (INT_MAX
// milliseconds); longer waits are cut to it.
const maxLockTimeout = time.Duration(math.MaxInt32) * time.Millisecond

func (pgDialect) lock(ctx context.Context, c *sql.Conn, key any, wait time.Duration, shared bool) (bool, error) {
	fn := "pg_advisory_lock"
	if shared {
		fn = "pg_advisory_lock_shared"
	}
	if wait <= 0 {
		var got bool
		err := c.QueryRowContext(ctx, "SELECT pg_try_"+strings.TrimPrefix(fn, "pg_")+"($1)", key).Scan(&got)
		return got, err
	}
	// The wait is the server's own queue, bounded by lock_timeout (which
	// applies to advisory locks); set_config(..., true) scopes it to this
	// statement's implicit transaction, so the pooled session keeps its
	// settings.
	if wait > maxLockTimeout {
		wait = maxLockTimeout
	}
	ms := (wait + time.Millisecond - 1) / time.Millisecond
	_, err := c.ExecContext(ctx, "WITH s AS (SELECT set_config('lock_timeout', $2, true)) SELECT "+fn+"($1) FROM s",
		key, strconv.FormatInt(int64(ms), 10)+"ms")
	if err == nil {
		return true, nil
	}
	if isLockTimeout(err) && ctx.Err() == nil {
		return false, nil
	}
	return false, err
}

// isLockTimeout recognises PostgreSQL's lock_not_available (55P03), raised
// when lock_timeout runs out, through the SQLState method drivers' errors
// have (pgx, lib/pq), or failing that its message.
func isLockTimeout(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return st.SQLState() == "55P03"
	}
	return strings.Contains(err.Error(), "lock timeout")
}

func (pgDialect) fence(ctx context.Context, c *sql.Conn, t string, key any, min int64) (int64, error) {
	var tok int64
	err := c.QueryRowContext(ctx, "INSERT INTO "+t+" AS f (name_key, token) VALUES ($1, GREATEST($2::bigint, "+pgNowMicros+")) "+
		"ON CONFLICT (name_key) DO UPDATE SET token = GREATEST(f.token + 1, EXCLUDED.token) RETURNING token", key, min).Scan(&tok)
	return tok, err
}

func (pgDialect) check(ctx context.Context, c *sql.Conn, key any) (bool, error) {
	k := uint64(key.(int64))
	var held bool
	err := c.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted "+
		"AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1)", int64(k>>32), int64(k&0xffffffff)).Scan(&held)
	return held, err
}

func (pgDialect) unlock(ctx context.Context, c *sql.Conn, key any, shared bool) (bool, error) {
	fn := "pg_advisory_unlock"
	if shared {
		fn = "pg_advisory_unlock_shared"
	}
	var got bool
	err := c.QueryRowContext(ctx, "SELECT "+fn+"($1)", key).Scan(&got)
	return got, err
}

func (pgDialect) kill(ctx context.Context, db *sql.DB, s session) error {
	_, err := db.ExecContext(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND "+
		"(extract(epoch from backend_start) * 1000000)::bigint = $2", s.id, s.start)
	return err
}
