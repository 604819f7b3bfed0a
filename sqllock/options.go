package sqllock

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/dlock-dev/dlock"
)

// Defaults of the options.
const (
	// DefaultMaxSessions is the most SQL sessions a Locker pins at once
	// (holds plus waits), unless MaxSessions says otherwise or the pool is
	// smaller (see MaxSessions).
	DefaultMaxSessions = 16
	// DefaultCheckInterval is how often a hold's pinned session is checked
	// (see CheckInterval).
	DefaultCheckInterval = time.Second
	// DefaultOpTimeout bounds each statement that does not wait for a lock
	// (see OpTimeout).
	DefaultOpTimeout = 5 * time.Second
	// DefaultFenceTable is the table that keeps the last fencing token of
	// each name (see FenceTable).
	DefaultFenceTable = "dlock_fence"
)

// Option configures a Locker (MySQL, Postgres). Options are plain function
// values; safe for concurrent use.
type Option func(*config) error

type config struct {
	maxSessions    int
	maxSessionsSet bool
	checkInterval  time.Duration
	opTimeout      time.Duration
	fenceTable     string
}

func defaultConfig() config {
	return config{
		maxSessions:   DefaultMaxSessions,
		checkInterval: DefaultCheckInterval,
		opTimeout:     DefaultOpTimeout,
		fenceTable:    DefaultFenceTable,
	}
}

// MaxSessions sets the most SQL sessions the Locker pins at once: one per
// hold and one per call waiting for a lock. Past it, Acquire and WithLock
// fail at once with ErrTooManySessions instead of taking more connections
// from the pool. n must be at least 1, and below the pool's
// MaxOpenConnections when that is set (otherwise locks could drain the
// pool the application needs). Default DefaultMaxSessions, lowered to half
// of the pool's MaxOpenConnections (at least 1) when that is smaller; the
// pool's setting is read once, by MySQL or Postgres.
func MaxSessions(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: MaxSessions(%d): must be at least 1", dlock.ErrInvalidArgument, n)
		}
		c.maxSessions, c.maxSessionsSet = n, true
		return nil
	}
}

// CheckInterval sets how often each hold checks, on its pinned session, that
// the session still holds the lock. A session that was killed, whose
// connection died, or that does not answer within OpTimeout ends the hold
// as lost. Default DefaultCheckInterval; at least 10ms.
func CheckInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: CheckInterval(%v): must be at least 10ms", dlock.ErrInvalidArgument, d)
		}
		c.checkInterval = d
		return nil
	}
}

// OpTimeout bounds every statement that does not wait for a lock: creating
// the fence table (Setup, or the first lock), reading the session id, the
// fencing token, the hold check, the release, and the KILL or
// pg_terminate_backend of an abandoned session, and the Redis witness's
// statements (SawRedis, OthersSawRedis); it also bounds Setup's wait for a
// session. A lock wait is bounded by its wait time plus OpTimeout. Default
// DefaultOpTimeout; at least 10ms.
func OpTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: OpTimeout(%v): must be at least 10ms", dlock.ErrInvalidArgument, d)
		}
		c.opTimeout = d
		return nil
	}
}

// identifier is what FenceTable accepts: a table name, optionally qualified
// by a database (MySQL) or schema (PostgreSQL) name; it is written into SQL
// statements as is.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// FenceTable sets the table that keeps the last fencing token of each lock
// name (see the package documentation for its definition). The Locker
// creates it if missing. name is a plain identifier, optionally qualified
// ("mydb.dlock_fence"). Default DefaultFenceTable.
func FenceTable(name string) Option {
	return func(c *config) error {
		if !identifier.MatchString(name) {
			return fmt.Errorf("%w: FenceTable(%q): not a plain [schema.]table identifier", dlock.ErrInvalidArgument, name)
		}
		c.fenceTable = name
		return nil
	}
}

func buildConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: option %d is nil", dlock.ErrInvalidArgument, i)
		}
		if err := o(&cfg); err != nil {
			return config{}, err
		}
	}
	return cfg, nil
}

// ErrTooManySessions is returned at once by Acquire and WithLock when the
// Locker already pins MaxSessions SQL sessions. It says that this process
// has too many SQL locks held or waited for at once; it is neither
// contention (dlock.ErrWaitTimeout) nor a database failure, and it wraps no
// dlock error. Nothing was sent to the database.
var ErrTooManySessions = errors.New("sqllock: too many SQL lock sessions")
