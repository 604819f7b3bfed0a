package discover

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"*", "a/b:c", true}, {"job:*", "job:1", true}, {"job:*", "jobs", false},
		{"j?b", "job", true}, {"j?b", "jb", false}, {"[ab]x", "bx", true}, {"[^ab]x", "bx", false},
		{"[a-c]1", "c1", true}, {"[a-c]1", "d1", false}, {`a\*`, "a*", true}, {`a\*`, "ab", false},
		{"*:1", "x:y:1", true}, {"", "", true}, {"", "a", false},
	} {
		if got := Glob(c.p, c.s); got != c.want {
			t.Errorf("Glob(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

func TestLooksLikeLock(t *testing.T) {
	if !LooksLikeLock([]string{"host/1/abc:3", "leader"}) || !LooksLikeLock([]string{"mode", "x:1:write"}) {
		t.Error("lock fields refused")
	}
	if LooksLikeLock([]string{"name", "x:1"}) || LooksLikeLock([]string{"leader"}) {
		t.Error("non-lock fields accepted")
	}
}
