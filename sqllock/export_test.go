package sqllock

import "context"

// Test hooks: the name mappings, so tests can look a lock up on the server.
var (
	MySQLLockName = mysqlName
	PGLockKey     = pgKey
)

// SessionQuery returns the statement that reads a session's id pair.
func (l *Locker) SessionQuery() string { return l.d.sessionQuery() }

// KillSession ends the session (id, start) the way an abandoned session is
// ended.
func (l *Locker) KillSession(ctx context.Context, id, start int64) error {
	return l.d.kill(ctx, l.db, session{id: id, start: start})
}
