package main

import (
	"strings"
	"testing"
	"time"
)

// Owners, hosts, names and a read-write lock's mode come from Redis, which
// anyone allowed to write there fills: a hostile holder's field (terminal
// escape codes, a C1 CSI, bytes that are not UTF-8) or mode is printed
// quoted, never raw.
func TestInspectQuotesHostileOwners(t *testing.T) {
	rdb := shared.NewClient(t)
	ctx := ctxT(t)
	const name = "t-hostile-owner"
	owner := "\x1b]0;pwned\x07\x1b[2J\u009b2J\xff:1"
	if err := rdb.HSet(ctx, name, owner, 1, "mode", "\x1b]0;pwned\x07").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, name, time.Minute)
	for _, args := range [][]string{{"inspect", name}, {"inspect", "--all"}} {
		r := dlockRun(t, nil, append([]string{"--redis", redisURL(shared)}, args...)...)
		wantCode(t, r, 0)
		if strings.ContainsAny(r.stdout, "\x1b\x07\u009b") || strings.Contains(r.stdout, "\xff") {
			t.Errorf("%v printed a hostile owner raw: %q", args, r.stdout)
		}
		if !strings.Contains(r.stdout, `\x1b]0;pwned`) {
			t.Errorf("%v did not show the owner quoted: %q", args, r.stdout)
		}
	}
}
