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
		var buf syncBuffer
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
