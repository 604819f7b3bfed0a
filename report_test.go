package dlock

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// A Client tells, once, at its first acquisition, what makes its Redis
// unsafe for locks (here an evicting policy), and says nothing of a healthy
// one.
func TestFirstContactReport(t *testing.T) {
	reportAtFirstContact = true
	defer func() { reportAtFirstContact = false }()
	evicting := testenv.StartRedis(t, testenv.WithArgs("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"))
	for _, tc := range []struct {
		r    *testenv.Redis
		want int // warn lines about eviction
	}{{evicting, 1}, {shared, 0}} {
		var buf testenv.Buffer
		c := newClient(t, tc.r, WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		for range 3 {
			m := c.Mutex("report:first-contact")
			mustLock(t, m)
			mustUnlock(t, m)
		}
		if tc.want > 0 {
			waitFor(t, "the eviction warning", func() bool { return strings.Contains(buf.String(), "check=eviction") })
		}
		time.Sleep(300 * time.Millisecond) // a second report would come now
		if n := strings.Count(buf.String(), "cannot hold locks safely"); n != tc.want {
			t.Fatalf("%d warnings on %s, want %d:\n%s", n, tc.r.Addr(), tc.want, buf.String())
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A Client given no logger still tells of a Redis that cannot hold locks
// safely (volatile-lru evicts keys with a TTL, which every lock has): the
// warning goes to slog.Default(). WithSafetyCheck(false) turns the checks
// off: no warning, and not one command of theirs reaches Redis.
func TestSafetyWarningByDefault(t *testing.T) {
	reportAtFirstContact = true
	defer func() { reportAtFirstContact = false }()
	volatile := testenv.StartRedis(t, testenv.WithArgs("--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"))
	var buf testenv.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer slog.SetDefault(prev)
	rdb := rdbFor(t, volatile)
	c := newClient(t, volatile)
	m := c.Mutex("report:default-logger")
	mustLock(t, m)
	// The client channel's confirmation renews the holds of its moment:
	// with one held here, this process learns every script's digest now,
	// and the count below holds no resend of a script as EVAL.
	waitSubscribed(t, ctxT(t), rdb, c)
	mustUnlock(t, m)
	waitFor(t, "the eviction warning on slog.Default()", func() bool {
		return strings.Contains(buf.String(), "check=eviction") && strings.Contains(buf.String(), "volatile-lru")
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	before := buf.String()
	if err := volatile.ResetStats(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	off := newClient(t, volatile, WithSafetyCheck(false))
	m = off.Mutex("report:default-logger")
	mustLock(t, m)
	waitSubscribed(t, ctxT(t), rdb, off) // its confirmation's renewal: one EVALSHA
	mustUnlock(t, m)
	if err := off.Close(); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != before {
		t.Fatalf("WithSafetyCheck(false) still warned:\n%s", strings.TrimPrefix(got, before))
	}
	st := commands(t, volatile)
	// Lock's, the confirmation's renewal's and Unlock's scripts; the checks
	// would add INFO, CONFIG GET and EVALs of their own.
	if st["info"] != 0 || st["config|get"] != 0 || st["eval"] != 0 || st["evalsha"] != 3 {
		t.Fatalf("WithSafetyCheck(false) still sent the checks' commands: %v", st)
	}
}
