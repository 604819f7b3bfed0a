package discover

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// Glob agrees with the Redis server's own SCAN MATCH, quirks included
// (unclosed sets, reversed ranges, escapes inside sets, a trailing '\'):
// a few thousand random patterns over a small alphabet that is mostly the
// glob's own syntax, against a database of random names.
func TestGlobMatchesRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rng := rand.New(rand.NewPCG(29, 5))
	random := func(alphabet string, min, max int) string {
		b := make([]byte, min+rng.IntN(max-min+1))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	names := map[string]bool{}
	for len(names) < 400 {
		names[random(`ab-]^\[`, 1, 6)] = true
	}
	// Long names and patterns of more than 63 elements: Match's
	// many-word path.
	for len(names) < 450 {
		names[random("ab", 60, 90)] = true
	}
	p := rdb.Pipeline()
	for n := range names {
		p.Set(ctx, n, "", 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	patterns := []string{"*", "**", "a*", "*b", "[", "[^", "[]", "[^]", "[a-", `\`, `[\`, `a\`, "[b-a]*", `[\]]*`, `[a\-]`, "[a-]]"}
	for len(patterns) < 3000 {
		patterns = append(patterns, random(`ab*?[]^-\`, 1, 8))
	}
	for len(patterns) < 3300 {
		patterns = append(patterns, random("ab***?", 64, 140))
	}
	long := 0
	for _, pat := range patterns {
		var server []string
		var cursor uint64
		for {
			ks, next, err := rdb.Scan(ctx, cursor, pat, 10000).Result()
			if err != nil {
				t.Fatal(err)
			}
			server = append(server, ks...)
			if cursor = next; cursor == 0 {
				break
			}
		}
		var ours []string
		g, err := Compile(pat)
		if err != nil {
			t.Fatal(err)
		}
		for n := range names {
			if g.Match(n) {
				ours = append(ours, n)
			}
		}
		if len(ours) > 0 && !Glob(pat, ours[0]) {
			t.Fatalf("Glob(%q, %q) disagrees with Compile(%q).Match", pat, ours[0], pat)
		}
		if len(pat) >= 64 && len(ours) > 0 {
			long++
		}
		sort.Strings(server)
		sort.Strings(ours)
		if strings.Join(server, "\x00") != strings.Join(ours, "\x00") {
			t.Fatalf("pattern %q: SCAN MATCH finds %q, Glob %q", pat, server, ours)
		}
	}
	if long < 30 {
		t.Fatalf("only %d of the 300 long patterns matched a name: the many-word path is barely tested", long)
	}
}

// The review's pattern: eight stars before a 'b' that never comes, against
// a 300-byte name. A backtracking matcher tries every way to place the
// stars (about 300^8/8! ways) and does not return in a lifetime; this one
// reads the name once. The result is awaited for a minute at most, a
// liveness bound (the match takes microseconds), so that the old matcher
// fails the test instead of hanging it.
func TestGlobBacktracking(t *testing.T) {
	name := strings.Repeat("a", 300)
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"*a*a*a*a*a*a*a*a*b", name, false},
		{"*a*a*a*a*a*a*a*a*b", name + "b", true},
		{"*?*?*?*?*?*?*?*?*?*b", name, false},
		{"*[a]*[a]*[a]*[a]*[a]*[a]*[a]*[a]*b", name, false},
		{strings.Repeat("*a", 150) + "*b", name, false},
		{strings.Repeat("*a", 150) + "*b", name + "b", true},
	} {
		got := make(chan bool, 1)
		go func() { got <- Glob(c.pattern, c.name) }()
		select {
		case g := <-got:
			if g != c.want {
				t.Errorf("Glob(%.30q..., %d bytes) = %v, want %v", c.pattern, len(c.name), g, c.want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("Glob(%.30q..., %d bytes) still running after a minute", c.pattern, len(c.name))
		}
	}
}

// Run filters by the compiled pattern (the review's pattern against a
// 300-byte lock name: not a match, then one that is), refuses a pattern
// over MaxPatternLen before any call, and stops at once when the caller it
// runs for is gone (Abandon) even though its own ctx lives on.
func TestRunMatchAndAbandon(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := strings.Repeat("a", 300)
	if err := rdb.HSet(ctx, name, "host/1/x:1", 1).Err(); err != nil {
		t.Fatal(err)
	}
	for pattern, want := range map[string]bool{"*a*a*a*a*a*a*a*a*b": false, "*a*a*a*a*a*a*a*a*": true} {
		f, err := Run(ctx, rdb, Options{Match: pattern})
		if err != nil || f.Locks[name] != want || len(f.Locks) != map[bool]int{true: 1}[want] {
			t.Fatalf("Run(%q): %v, %v", pattern, f.Locks, err)
		}
	}
	if _, err := Run(ctx, rdb, Options{Match: strings.Repeat("*", MaxPatternLen+1)}); err == nil {
		t.Fatal("a pattern over MaxPatternLen was accepted")
	}
	gone := errors.New("the caller is gone")
	caller, leave := context.WithCancelCause(context.Background())
	leave(gone)
	f, err := Run(ctx, rdb, Options{Abandon: caller})
	if !errors.Is(err, gone) || f.Cost.Scans != 0 {
		t.Fatalf("abandoned Run: %v after %d scans", err, f.Cost.Scans)
	}
}
