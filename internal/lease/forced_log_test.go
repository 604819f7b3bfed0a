package lease

import (
	"fmt"
	"testing"
)

// forcedLog answers "did news about key come since seen" exactly while it
// holds every message since seen, and yes once more came than it keeps.
func TestForcedLogSince(t *testing.T) {
	var l forcedLog
	if l.since("a", 0) {
		t.Fatal("an empty log has news")
	}
	l.add("a")
	l.add("b")
	for _, c := range []struct {
		key  string
		seen uint64
		want bool
	}{{"a", 0, true}, {"a", 1, false}, {"b", 1, true}, {"b", 2, false}, {"c", 0, false}} {
		if got := l.since(c.key, c.seen); got != c.want {
			t.Errorf("since(%q, %d) = %v, want %v", c.key, c.seen, got, c.want)
		}
	}
	// Wrap the ring: the last forcedKept messages are about other keys.
	for i := range forcedKept {
		l.add(fmt.Sprint("k", i))
	}
	if seen := l.n - forcedKept; l.since("a", seen) || !l.since("k0", seen) {
		t.Errorf("after a wrap, since(a) = %v (want false), since(k0) = %v (want true)", l.since("a", seen), l.since("k0", seen))
	}
	if !l.since("a", 1) {
		t.Error("more messages than the log keeps since seen: want news whatever the key")
	}
}
