package sqllock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
)

// FuzzNames: any name maps to a 64-character lower-case MySQL lock name
// with the "dlock:" prefix, distinct names map to distinct MySQL names and
// (almost surely) PostgreSQL keys, and the mapping is stable.
func FuzzNames(f *testing.F) {
	for _, s := range [][2]string{{"a", "A"}, {"coupon:42", "Coupon:42"}, {strings.Repeat("x", 100) + "a", strings.Repeat("x", 100) + "b"}, {"", "\x00"}} {
		f.Add(s[0], s[1])
	}
	hex := func(r rune) bool { return (r < '0' || r > '9') && (r < 'a' || r > 'f') }
	f.Fuzz(func(t *testing.T, a, b string) {
		ma := mysqlName(a)
		if len(ma) != 64 || !strings.HasPrefix(ma, "dlock:") || strings.IndexFunc(ma[6:], hex) >= 0 {
			t.Fatalf("mysqlName(%q) = %q", a, ma)
		}
		if again, pa := mysqlName(a), pgKey(a); ma != again || pa != pgKey(a) {
			t.Fatal("mapping not stable")
		}
		if a != b && (ma == mysqlName(b) || pgKey(a) == pgKey(b)) {
			t.Fatalf("%q and %q collide", a, b)
		}
	})
}

// FuzzOptions: any option values either build a config or fail with
// dlock.ErrInvalidArgument; nothing panics.
func FuzzOptions(f *testing.F) {
	f.Add(16, int64(time.Second), int64(5*time.Second), "dlock_fence")
	f.Add(0, int64(0), int64(-1), "a.b.c")
	f.Add(-3, int64(time.Millisecond), int64(1<<62), "x;DROP TABLE y")
	f.Fuzz(func(t *testing.T, n int, check, op int64, table string) {
		cfg, err := buildConfig([]Option{MaxSessions(n), CheckInterval(time.Duration(check)), OpTimeout(time.Duration(op)), FenceTable(table)})
		if err != nil {
			if !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
			}
			return
		}
		if cfg.maxSessions < 1 || cfg.checkInterval < 10*time.Millisecond || cfg.opTimeout < 10*time.Millisecond || !identifier.MatchString(cfg.fenceTable) {
			t.Fatalf("accepted %+v", cfg)
		}
	})
}
