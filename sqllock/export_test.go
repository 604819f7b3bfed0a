package sqllock

// Test hooks: the name mappings, so tests can look a lock up on the server.
var (
	MySQLLockName = mysqlName
	PGLockKey     = pgKey
)
