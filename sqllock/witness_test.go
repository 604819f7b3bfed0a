package sqllock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A database user without CREATE, whose DBA made the witness table, gets
// FallbackStrict's witness (SawRedis, OthersSawRedis) as it gets fencing
// tokens: the Locker uses the table that is there. Before, every call
// failed on CREATE TABLE IF NOT EXISTS, so FallbackStrict never granted.
func TestWitnessWithoutCreate(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		admin := b.open(t)
		ctx := ctxT(t, 30*time.Second)
		// The DBA's part: the tables, and a user who may only use them.
		dba := b.newLocker(t, b.open(t))
		if err := dba.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		if err := dba.SawRedis(ctx, "dba"); err != nil {
			t.Fatal(err)
		}
		var stmts []string
		var dsn string
		switch b.name {
		case "mysql":
			for _, host := range []string{"%", "localhost", "127.0.0.1"} {
				stmts = append(stmts, "CREATE USER IF NOT EXISTS 'nocreate'@'"+host+"' IDENTIFIED BY 'pw'",
					"GRANT SELECT, INSERT, UPDATE ON "+testenv.MariaDBDatabase+".* TO 'nocreate'@'"+host+"'")
			}
			dsn = strings.Replace(b.dsn(), "root@", "nocreate:pw@", 1)
		default:
			stmts = []string{"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'nocreate') THEN CREATE ROLE nocreate LOGIN PASSWORD 'pw'; END IF; END $$",
				"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
				"GRANT SELECT, INSERT, UPDATE ON dlock_fence, dlock_redis_seen TO nocreate"}
			dsn = strings.Replace(b.dsn(), testenv.PostgresUser+"@", "nocreate:pw@", 1)
		}
		for _, q := range stmts {
			if _, err := admin.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		db := b.openDSN(t, dsn)
		if _, err := db.ExecContext(ctx, "CREATE TABLE nocreate_probe (a int)"); err == nil {
			_, _ = admin.ExecContext(ctx, "DROP TABLE nocreate_probe")
			t.Fatal("the user may CREATE: the test proves nothing")
		}
		l := b.newLocker(t, db)
		if err := l.SawRedis(ctx, "client-a"); err != nil {
			t.Fatalf("SawRedis without CREATE: %v", err)
		}
		if saw, err := l.OthersSawRedis(ctx, "client-b", time.Minute); err != nil || !saw {
			t.Fatalf("OthersSawRedis without CREATE = %v, %v; want true", saw, err)
		}
		if saw, err := l.OthersSawRedis(ctx, "client-a", time.Nanosecond); err != nil || saw {
			t.Fatalf("OthersSawRedis(1ns) = %v, %v; want false", saw, err)
		}
	})
}
