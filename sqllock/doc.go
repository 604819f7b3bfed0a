// Package sqllock provides named locks held in a SQL database: MySQL 8 and
// MariaDB 10.x user-level locks (GET_LOCK) and PostgreSQL session-level
// advisory locks. It is dlock's fallback tier (the seeds' ADR-006: Redis
// first, a MySQL named lock when Redis fails), usable on its own as well.
// The caller brings the database driver (for example
// github.com/go-sql-driver/mysql or github.com/jackc/pgx/v5/stdlib) and its
// *sql.DB.
//
// # Using it
//
//	db, _ := sql.Open("mysql", dsn)
//	locker, err := sqllock.MySQL(db) // or sqllock.Postgres(db)
//	...
//	defer locker.Close()
//	err = locker.WithLock(ctx, "coupon:42", func(ctx context.Context) error {
//		// ctx is cancelled with cause dlock.ErrLockLost if the hold is lost;
//		// dlock.TokenFrom(ctx) is the fencing token.
//		return issueCoupon(ctx)
//	}, dlock.WaitTime(5*time.Second))
//
// WithLock takes dlock's options (WaitTime, LeaseTime, Read, Write, Fair)
// and behaves like dlock.Client.WithLock. Acquire is the lower-level call a
// dlock Client's fallback uses: it returns a Hold with Token, Done, Err and
// Release.
//
// # How it works
//
// Each hold pins one session (a *sql.Conn) from the pool for its whole life:
// the lock is taken, checked and released on that session, never on
// whichever pooled session database/sql would pick next (the classic
// *sql.DB trap: GET_LOCK on one connection, RELEASE_LOCK on another, and the
// lock stays held). The session goes back to the pool after the release,
// holding nothing. A call waiting for a lock pins a session too. A Locker
// never pins more than MaxSessions sessions (default 16, or half the pool's
// MaxOpenConns when that is smaller); past it, calls fail at once with
// ErrTooManySessions instead of draining the pool the application needs
// (ADR-006's connection pool exhaustion).
//
// Waiting happens in the database's own lock queue, not by polling: MySQL
// GET_LOCK(name, wait); PostgreSQL pg_advisory_lock with lock_timeout set to
// the wait for that one statement (set_config(..., true) inside the
// statement's implicit transaction, so the pooled session's settings do not
// change; lock_timeout does apply to advisory locks). A wait of 0 is one
// attempt (GET_LOCK(name, 0), pg_try_advisory_lock). dlock.Read takes
// pg_advisory_lock_shared on PostgreSQL; MySQL has no shared user-level
// lock, so there readers exclude each other like writers. Mutex, Fair and
// Write locks are exclusive and exclude each other on one name; Fair gets
// whatever order the database grants in (PostgreSQL queues lock waiters in
// arrival order; MySQL and MariaDB promise no order).
//
// Names: MySQL limits lock names to 64 characters and compares them
// case-insensitively (MariaDB 10.11 compares them case-sensitively), so
// every dlock name is mapped to "dlock:" followed by the first 58 hex digits
// of its SHA-256: any length works and names differing only by case stay
// distinct. PostgreSQL advisory keys are 64-bit integers: a name maps to the
// first 8 bytes of its SHA-256. Two names of n distinct ones share a key
// with probability about n²/2⁶⁵ (3·10⁻⁸ for a million names); a collision
// only makes the two names exclude each other, never lets two holders in.
// The keys share the database's advisory-key space with any other
// application using pg_advisory_lock(bigint) there.
//
// Several locks at once: a MySQL session that holds several GET_LOCKs can
// fail with a deadlock error (MySQL ER_USER_LOCK_DEADLOCK, 3058; MariaDB
// ER_LOCK_DEADLOCK, 1213), and a session re-taking a name it holds just
// counts up. Neither can happen here: each hold has its own session, so a
// call chain holding several names holds several sessions. Two call chains
// taking the same names in opposite orders still wait for each other until
// their wait runs out; take names in a fixed order (dlock's MultiLock sorts
// them).
//
// A ctx that ends while a call waits makes the call return at once with
// ctx's error (both drivers above close the connection on cancellation).
// The session is then closed rather than returned to the pool, and ended on
// the server (KILL CONNECTION <id>, or pg_terminate_backend of its pid and
// start time, read before the lock call) in the background within
// OpTimeout: a server that does not notice the vanished client while it
// waits (MySQL's GET_LOCK may not, until its timeout) would keep the session
// queued and could even grant it the lock; MariaDB 10.11 noticed within
// about a second in our tests, PostgreSQL sooner. Ending another session
// needs no privilege beyond being the same database user.
//
// Loss: every CheckInterval (default 1s) a hold asks its own session
// whether it still holds the lock (MySQL IS_USED_LOCK(name) =
// CONNECTION_ID(); PostgreSQL pg_locks for its pid). If the session was
// killed (KILL, pg_terminate_backend), its connection died, the answer is
// no, or the check does not answer within OpTimeout (default 5s), the hold
// ends as lost, with the same signal as a lost Redis hold: Done is closed,
// Err wraps dlock.ErrLockLost, WithLock's fn context is cancelled with that
// cause. A killed session is noticed within CheckInterval plus one round
// trip; a silent database within CheckInterval plus OpTimeout.
//
// Fencing tokens: a table (DefaultFenceTable, dlock_fence; FenceTable
// changes it) keeps the last token of each name. The Locker creates it if
// missing; a database user without CREATE needs it made by hand, and so
// the witness table (WitnessTable, dlock_redis_seen) where FallbackStrict
// is used; the Locker then only reads and writes them:
//
//	-- MySQL / MariaDB
//	CREATE TABLE dlock_fence (name_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
//	                          token BIGINT NOT NULL) ENGINE=InnoDB;
//	CREATE TABLE dlock_redis_seen (client_key VARCHAR(64) CHARACTER SET ascii NOT NULL PRIMARY KEY,
//	                               seen_us BIGINT NOT NULL) ENGINE=InnoDB;
//	-- PostgreSQL
//	CREATE TABLE dlock_fence (name_key bigint PRIMARY KEY, token bigint NOT NULL);
//	CREATE TABLE dlock_redis_seen (client_key TEXT PRIMARY KEY, seen_us BIGINT NOT NULL);
//
// Right after a grant, on the holding session and while it holds the lock,
// the name's row is set to max(its last token + 1, the database clock in
// microseconds, floor + 1) in one statement, and that is the hold's token.
// floor is Acquire's last argument, at most MaxTokenFloor; WithLock takes
// it from the options' dlock.TokenFloor and from a grant of the same name
// that a dlock hold attached to ctx (dlock.HeldGrantFrom), never from one
// made with dlock.ContextWithGrant, whose token is whatever its maker wrote.
//
// # What is guaranteed
//
// While the database server keeps running and a hold's session lives, no
// other session of that server holds the same name (for dlock.Read on
// PostgreSQL: no writer). The server enforces this; a lock never expires
// while its session lives (the checks keep the session from idling out).
// A hold ends only by Release, by its lease (dlock.LeaseTime: released, and
// reported as a loss, when the lease runs out), by Close (reported as a
// loss wrapping dlock.ErrClosed too), or by its session ending, which the
// holder learns within the check bounds above.
//
// Tokens of one name strictly increase across all grants made through this
// server's fence table, by any number of processes, and each token is at
// least the server's clock in microseconds at the grant and greater than
// the floor it was given. Redis tier tokens are the Redis server's clock in
// microseconds at the start of a 24-hour counter sequence, plus one per
// grant. So the two tiers follow one increasing order when switching from
// Redis to SQL as long as the Redis and database clocks differ by less than
// the time between the last Redis grant and the first SQL grant, and the
// Redis tier granted fewer than one lock per microsecond on average since
// its counter sequence began; passing the last Redis token seen as floor
// removes both conditions for that caller. Switching back from SQL to Redis
// is ordered only if the Redis counter starts a new sequence (after a
// restart without data, or its 24-hour expiry) after the database clock has
// passed the last SQL token, or if the Redis tier raises its counter past
// the last SQL token. A dlock Client built WithFallback does the latter for
// the names it grants during its recovery window: such a Redis grant also
// takes the SQL lock, runs fn with the SQL token, and raises the name's
// Redis counter to it. A raise that fails is not dropped: until one
// succeeds, that Client's Redis grants of the name keep taking the SQL lock
// (so their tokens are SQL tokens, above it) and raise again, so the
// Client never hands out a Redis token of the name below a SQL token it
// ran fn with. Other Clients learn nothing of it: their order rests on
// their own recovery windows and on the raises that succeeded.
//
// Every call returns promptly once its ctx is done, whatever the database
// does; a release started by WithLock or Release finishes in the background
// within OpTimeout even if the caller's ctx is cancelled. After Close, or
// once a call returned, the Locker leaves no session pinned, no lock held
// and no goroutine running (Close waits for the background work).
//
// # What is not guaranteed
//
// A SQL lock does not exclude a Redis holder of the same name: the two
// tiers are separate locks, and only the rules of the dlock Client that
// switches between them (and the fencing token, checked by the protected
// resource) keep them from admitting two holders.
//
// When a hold's session ends (an operator's KILL, a network cut, a database
// restart or failover), the server frees the lock at once, but the holder
// learns of it only at its next check: for up to CheckInterval (or
// CheckInterval plus OpTimeout if the database went silent) a new holder
// and the old one, not yet told, can overlap. So can a holder paused (GC,
// SIGSTOP) while its session was ended. The fencing token is what lets the
// protected resource reject the late one.
//
// Locks live in one server's memory: they are not replicated. Every Locker
// sharing a name must use the same primary server; replicas (and Galera or
// Group Replication peers) do not see them, and a failover drops them all
// (holders are told at their next check). Session-level locks need real
// sessions: behind a pooler that multiplexes sessions (PgBouncer in
// transaction or statement mode, ProxySQL multiplexing) they do not work;
// the check reports a lock its session does not hold as lost, but do not
// rely on it.
//
// The fence table is as durable as the database's commits: if a crash loses
// the last committed updates, the clock term still keeps tokens increasing
// when the clock advanced by more microseconds than the number of lost
// grants; a database clock set back can repeat tokens.
package sqllock
