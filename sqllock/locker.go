package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-dev/dlock"
)

// Locker takes named locks in one SQL database: MySQL/MariaDB user-level
// locks (MySQL) or PostgreSQL advisory locks (Postgres). Each hold pins one
// session (*sql.Conn) of the caller's *sql.DB for its whole life, so the
// lock and its release always run on the same session, and the Locker
// never pins more than MaxSessions sessions at once.
//
// All methods are safe for concurrent use by any number of goroutines.
type Locker struct {
	db  *sql.DB
	d   dialect
	cfg config

	slots chan struct{} // one token per pinned session (MaxSessions)
	ready atomic.Bool   // the fence table is known to exist

	witnessReady atomic.Bool // the witness table is known to exist

	closeCtx context.Context // done once Close began
	closeNow context.CancelFunc

	mu     sync.Mutex
	closed bool

	bg sync.WaitGroup // hold keepers and session kills
}

// MySQL returns a Locker using MySQL 8 or MariaDB 10.x user-level locks
// (GET_LOCK) through db, whose driver the caller chose (for example
// github.com/go-sql-driver/mysql). db stays the caller's: Close does not
// close it. Nothing is sent to the database until the first lock (or
// Setup). Bad options return an error wrapping dlock.ErrInvalidArgument.
func MySQL(db *sql.DB, opts ...Option) (*Locker, error) {
	return newLocker(db, mysqlDialect{}, opts)
}

// Postgres returns a Locker using PostgreSQL session-level advisory locks
// through db, whose driver the caller chose (for example
// github.com/jackc/pgx/v5/stdlib). db stays the caller's: Close does not
// close it. Nothing is sent to the database until the first lock (or
// Setup). Bad options return an error wrapping dlock.ErrInvalidArgument.
func Postgres(db *sql.DB, opts ...Option) (*Locker, error) {
	return newLocker(db, pgDialect{}, opts)
}

func newLocker(db *sql.DB, d dialect, opts []Option) (*Locker, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", dlock.ErrInvalidArgument)
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if maxOpen := db.Stats().MaxOpenConnections; maxOpen > 0 {
		switch {
		case cfg.maxSessionsSet && cfg.maxSessions >= maxOpen:
			return nil, fmt.Errorf("%w: MaxSessions(%d) would let locks take the whole pool (MaxOpenConns %d); use fewer",
				dlock.ErrInvalidArgument, cfg.maxSessions, maxOpen)
		case !cfg.maxSessionsSet && cfg.maxSessions > maxOpen/2:
			cfg.maxSessions = max(1, maxOpen/2)
			if cfg.maxSessions >= maxOpen {
				return nil, fmt.Errorf("%w: a pool of MaxOpenConns %d leaves no session for anything but one lock; raise it",
					dlock.ErrInvalidArgument, maxOpen)
			}
		}
	}
	l := &Locker{
		db:    db,
		d:     d,
		cfg:   cfg,
		slots: make(chan struct{}, cfg.maxSessions),
	}
	l.closeCtx, l.closeNow = context.WithCancel(context.Background())
	return l, nil
}

// Backend returns "mysql" or "postgres": the dlock.Grant Backend of this
// Locker's holds. Safe for concurrent use.
func (l *Locker) Backend() string { return l.d.backend() }

// MaxSessions returns the most sessions the Locker pins at once (see the
// MaxSessions option). Safe for concurrent use.
func (l *Locker) MaxSessions() int { return cap(l.slots) }

// Setup checks that the database answers and creates the fence table if it
// is missing, so that a misconfiguration shows at startup rather than at
// the first fallback. It is optional: the first lock does the same. It uses
// one pooled session for a moment. Getting the session and each statement
// are bounded by OpTimeout as well as by ctx, so that a database that
// accepts and never answers fails Setup even under a ctx without a
// deadline; a session cut off that way is closed, not pooled. Safe for
// concurrent use.
func (l *Locker) Setup(ctx context.Context) error {
	if l.isClosed() {
		return fmt.Errorf("sqllock: setup: %w", dlock.ErrClosed)
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.opTimeout)
	c, err := l.db.Conn(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("sqllock: setup: get session: %w", err)
	}
	if err := l.setup(ctx, c); err != nil {
		// It may have been cut off mid-statement: never pool it.
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
		_ = c.Close()
		return err
	}
	return c.Close()
}

// setup creates the fence table unless an earlier call did; each statement
// is bounded by OpTimeout.
func (l *Locker) setup(ctx context.Context, c *sql.Conn) error {
	if l.ready.Load() {
		return nil
	}
	t := l.cfg.fenceTable
	if err := createOrFind(ctx, c, l.cfg.opTimeout, l.d.createTable(t), l.d.probeTable(t)); err != nil {
		return fmt.Errorf("sqllock: create fence table %s: %w", t, err)
	}
	l.ready.Store(true)
	return nil
}

// execer is what createOrFind needs: *sql.DB and *sql.Conn have it.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// createOrFind runs create (a CREATE TABLE IF NOT EXISTS) and, when it
// fails, probe (a SELECT of no row from the table): two sessions creating
// the table at once can fail (PostgreSQL) although the table then exists,
// and so does a user without CREATE whose DBA made the table. It returns
// create's error when the table is not there either. Each statement is
// bounded by timeout (OpTimeout) as well as by ctx.
func createOrFind(ctx context.Context, db execer, timeout time.Duration, create, probe string) error {
	exec := func(q string) error {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := db.ExecContext(sctx, q)
		return err
	}
	err := exec(create)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return err // ctx is over: the probe could only fail too
	}
	if perr := exec(probe); perr != nil {
		return err
	}
	return nil
}

func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close ends every hold of the Locker: holders are told first (Done closes,
// Err wraps dlock.ErrLockLost and dlock.ErrClosed, WithLock's fn context is
// cancelled with that cause), then the locks are released and the sessions
// returned to the pool; calls waiting for a lock return an error wrapping
// dlock.ErrClosed. Close waits for that work, each statement of which is
// bounded by OpTimeout. Later Setup, Acquire and WithLock calls return
// dlock.ErrClosed before any network call; Close itself is idempotent
// (later calls return nil). It does not close the *sql.DB. Safe for
// concurrent use.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.closeNow()
	l.bg.Wait()
	return nil
}

// MaxTokenFloor is the highest token floor Acquire and WithLock accept.
// Real tokens are microseconds since 1970 plus a count of grants (about
// 1.8e15 in 2026), far below it; a floor above it is no token any tier
// issued, and one near MaxInt64 would leave the name no token to grant
// (the column is a signed 64-bit integer). A constant.
const MaxTokenFloor = math.MaxInt64 / 2

// validate checks Acquire's arguments; it returns whether the lock is
// shared.
func (l *Locker) validate(name string, set dlock.FallbackRequest, floor uint64) (bool, error) {
	if name == "" {
		return false, fmt.Errorf("%w: empty lock name", dlock.ErrInvalidArgument)
	}
	if set.Wait < 0 {
		return false, fmt.Errorf("%w: negative wait time %v", dlock.ErrInvalidArgument, set.Wait)
	}
	if set.Lease < 0 {
		return false, fmt.Errorf("%w: negative lease time %v", dlock.ErrInvalidArgument, set.Lease)
	}
	if floor > MaxTokenFloor {
		return false, fmt.Errorf("%w: token floor %d is above MaxTokenFloor (%d): it would leave the name few tokens to grant", dlock.ErrInvalidArgument, floor, uint64(MaxTokenFloor))
	}
	switch set.Kind {
	case "", dlock.KindMutex, dlock.KindFair, dlock.KindWrite:
		return false, nil
	case dlock.KindRead:
		// MySQL has no shared user-level lock: readers exclude each other.
		return l.d.backend() == "postgres", nil
	default:
		return false, fmt.Errorf("%w: lock kind %q has no SQL form", dlock.ErrInvalidArgument, set.Kind)
	}
}

// errUnresponsive is the cause of an acquisition cut short because the
// database did not answer within the wait plus OpTimeout.
var errUnresponsive = errors.New("sqllock: database did not answer in time")

// Acquire takes the lock name and returns its Hold, which pins one session
// until Release (or loss). set gives the wait (0: one attempt; the zero
// LockSettings is valid), the lease (0: held until Release; otherwise the
// hold ends as lost, and the lock is released, when the lease runs out) and
// the kind (dlock.KindRead is shared on PostgreSQL and exclusive on MySQL;
// the other kinds are exclusive; dlock.KindMulti is refused). The hold's
// fencing token is greater than floor (pass 0, or the last token the
// caller saw from another tier; see the package documentation).
//
// Errors: dlock.ErrInvalidArgument for bad input and dlock.ErrClosed after
// Close, both before any network call; ErrTooManySessions, at once, when
// MaxSessions sessions are pinned; dlock.ErrWaitTimeout (wrapped) when the
// wait ran out; the ctx's error (errors.Is(err, context.Canceled) or
// DeadlineExceeded) when ctx ended first, returned promptly whatever the
// database does; otherwise the database's error. Every error leaves no lock
// and no pinned session behind (an abandoned session is ended on the server
// in the background, within OpTimeout). Safe for concurrent use.
func (l *Locker) Acquire(ctx context.Context, name string, set dlock.FallbackRequest, floor uint64) (*Hold, error) {
	shared, err := l.validate(name, set, floor)
	if err != nil {
		return nil, err
	}
	// Counted in bg so that Close waits for calls in flight (and for the
	// session kills they may start).
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("sqllock: acquire %q: %w", name, dlock.ErrClosed)
	}
	l.bg.Add(1)
	l.mu.Unlock()
	defer l.bg.Done()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqllock: acquire %q: %w", name, context.Cause(ctx))
	}
	select {
	case l.slots <- struct{}{}:
	default:
		return nil, fmt.Errorf("%w: %d pinned, acquire %q refused", ErrTooManySessions, cap(l.slots), name)
	}
	h, err := l.acquire(ctx, name, set, shared, floor)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// acquire does Acquire's work once a session slot is taken; it gives the
// slot back on failure.
func (l *Locker) acquire(ctx context.Context, name string, set dlock.FallbackRequest, shared bool, floor uint64) (*Hold, error) {
	start := time.Now()
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.closeCtx, func() { cancel(dlock.ErrClosed) })
	defer stop()
	// Whatever the database does, the whole acquisition ends by then (a
	// wait too long to add to is bounded by ctx alone).
	bctx, bcancel := actx, context.CancelFunc(func() {})
	if bound := set.Wait + 2*l.cfg.opTimeout; bound > set.Wait {
		bctx, bcancel = context.WithTimeoutCause(actx, bound, errUnresponsive)
	}
	defer bcancel()

	fail := func(step string, err error) error {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("sqllock: acquire %q: %s: %w", name, step, context.Cause(ctx))
		case errors.Is(context.Cause(actx), dlock.ErrClosed):
			return fmt.Errorf("sqllock: acquire %q: %w", name, dlock.ErrClosed)
		case errors.Is(context.Cause(bctx), errUnresponsive):
			return fmt.Errorf("sqllock: acquire %q: %s: %w (%v)", name, step, errUnresponsive, err)
		}
		return fmt.Errorf("sqllock: acquire %q: %s: %w", name, step, err)
	}

	c, err := l.db.Conn(bctx)
	if err != nil {
		l.freeSlot()
		return nil, fail("get session", err)
	}
	if err := l.setup(bctx, c); err != nil {
		l.abandon(c, nil)
		return nil, fail("setup", err)
	}
	var s session
	if err := c.QueryRowContext(bctx, l.d.sessionQuery()).Scan(&s.id, &s.start); err != nil {
		l.abandon(c, nil)
		return nil, fail("read session id", err)
	}
	key := l.d.key(name)
	wait := max(0, set.Wait-time.Since(start))
	if set.Wait == 0 {
		wait = 0
	}
	got, err := l.d.lock(bctx, c, key, wait, shared)
	if err != nil {
		// Interrupted mid-wait: the server may still queue (and later
		// grant) this session; end it there too.
		l.abandon(c, &s)
		return nil, fail("lock", err)
	}
	if !got {
		l.release(c)
		return nil, fmt.Errorf("sqllock: %w: %q not acquired within %v", dlock.ErrWaitTimeout, name, set.Wait)
	}
	opctx, opcancel := context.WithTimeout(bctx, l.cfg.opTimeout)
	tok, err := l.d.fence(opctx, c, l.cfg.fenceTable, key, int64(floor)+1)
	opcancel()
	if err != nil {
		l.abandon(c, &s)
		return nil, fail("fencing token", err)
	}
	h := &Hold{
		l:      l,
		name:   name,
		kind:   set.Kind,
		shared: shared,
		key:    key,
		token:  uint64(tok),
		lease:  set.Lease,
		conn:   c,
		sess:   s,
		relReq: make(chan struct{}),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	if h.kind == "" {
		h.kind = dlock.KindMutex
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		// Close began after the grant: give the lock back now.
		h.unlockAndReturn()
		return nil, fmt.Errorf("sqllock: acquire %q: %w", name, dlock.ErrClosed)
	}
	l.bg.Add(1)
	l.mu.Unlock()
	go h.keep()
	return h, nil
}

func (l *Locker) freeSlot() { <-l.slots }

// release returns a healthy session to the pool and its slot.
func (l *Locker) release(c *sql.Conn) {
	_ = c.Close()
	l.freeSlot()
}

// abandon closes the session's connection instead of returning it to the
// pool (database/sql discards a connection whose Raw callback reports
// driver.ErrBadConn) and, when s is known, ends the session on the server
// too, in the background and within OpTimeout: a session cut off in the
// middle of GET_LOCK or pg_advisory_lock would otherwise stay queued, and
// could even be granted the lock, until the server noticed. The slot is
// freed once the session is gone (or the kill gave up).
func (l *Locker) abandon(c *sql.Conn, s *session) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
	if s == nil {
		l.freeSlot()
		return
	}
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		defer l.freeSlot()
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.opTimeout)
		defer cancel()
		_ = l.d.kill(ctx, l.db, *s)
	}()
}
