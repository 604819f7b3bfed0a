package main

import (
	"strings"
	"testing"
	"time"
)

// unlock --force on a key that is not a lock leaves it intact and exits
// with its own code, exitNotLock, saying so without Redis' raw error.
// Before, it deleted a {name, email} hash ("user:1 was held by email,
// name: released it", exit 0), and on a string printed WRONGTYPE.
func TestUnlockForceRefusesWhatIsNotALock(t *testing.T) {
	rdb := shared.NewClient(t)
	ctx := ctxT(t)
	rdb.HSet(ctx, "t-user:1", "name", "ann", "email", "ann@example.com")
	rdb.Expire(ctx, "t-user:1", time.Minute)
	rdb.Set(ctx, "t-unlock-string", "v", time.Minute)
	for _, name := range []string{"t-user:1", "t-unlock-string"} {
		before := rdb.Dump(ctx, name).Val()
		r := dlockRun(t, nil, "--redis", redisURL(shared), "unlock", "--force", name)
		wantCode(t, r, exitNotLock)
		oneLineErr(t, r, "is not a lock")
		if r.stdout != "" || strings.Contains(r.stderr, "WRONGTYPE") {
			t.Fatalf("stdout %q, stderr %q", r.stdout, r.stderr)
		}
		if rdb.Dump(ctx, name).Val() != before {
			t.Fatalf("%s was changed", name)
		}
	}
	r := dlockRun(t, nil, "unlock", "--help")
	if !strings.Contains(r.stdout, "65 NAME is not a lock") {
		t.Fatalf("unlock --help does not document exit code 65:\n%s", r.stdout)
	}
}
