package keys

import (
	"errors"
	"strings"
	"testing"
)

// A namespace is spliced into the scripts' channel literals and begins
// every key, so NewSpace accepts only the letters, digits, '_', '.' and
// '-': nothing that could end or escape a Lua quoted string, and no ':'.
func TestNamespaceAlphabet(t *testing.T) {
	for _, ns := range []string{
		"x'..redis.call('set','pwned','1').ok..'", // ends the Lua string
		`y\`,   // escapes the Lua string's closing quote
		"a:b",  // nests: "a" with name "b:x" is "a:b" with name "x"
		"a\"b", // the other Lua quote
		"a]]b", // a long bracket's end
		"a\nb", // ends a Lua line
		"ключ", // not ASCII
		"a/b",  // outside the alphabet
		"a%b",  // a Lua pattern character
		"",     // empty
		strings.Repeat("n", MaxNamespaceLen+1),
	} {
		if _, err := NewSpace(ns); !errors.Is(err, ErrBadNamespace) {
			t.Errorf("NewSpace(%q) = %v, want ErrBadNamespace", ns, err)
		}
	}
	for _, ns := range []string{"svc", "team-a.prod_1", "A", "0", strings.Repeat("n", MaxNamespaceLen)} {
		if _, err := NewSpace(ns); err != nil {
			t.Errorf("NewSpace(%q) = %v", ns, err)
		}
	}
}

// No two (namespace, name) pairs share a key: the namespace has no ':', so
// the first ':' of a namespaced key ends it, and the rest is the name.
func TestNamespacedKeysNeverAlias(t *testing.T) {
	// The case: tenant "a" with lock "b:x" was tenant "a:b"'s
	// lock "x", and could force it away.
	a, _ := NewSpace("a")
	if ab, err := NewSpace("a:b"); err == nil && ab.Key("x") == a.Key("b:x") {
		t.Errorf("namespace a:b accepted: its lock x is namespace a's lock b:x (%q)", a.Key("b:x"))
	}
	spaces := []string{"a", "a.b", "a-b", "ab", "b"}
	names := []string{"x", "b:x", "b", ":x", "a:b:x", "{x}", "user:{42}"}
	seen := map[string]string{}
	for _, ns := range spaces {
		s, err := NewSpace(ns)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			f := s.For(name)
			who := ns + " / " + name
			for _, k := range []string{f.Lock, f.Fence, f.Queue, f.Forced, f.Readers, f.Writers, FenceStart(f.Fence)} {
				if prev, ok := seen[k]; ok {
					t.Errorf("%s and %s share the key %q", prev, who, k)
				}
				seen[k] = who
				if got, _, _ := strings.Cut(k, ":"); got != ns {
					t.Errorf("%s: key %q does not begin with its namespace and ':'", who, k)
				}
			}
		}
	}
}

// A name that is one of dlock's own keys, or holds a control character,
// is refused: the first would break the lock whose companion it is with
// WRONGTYPE, the second would drive the terminal of whoever lists it.
func TestValidateReservedAndControl(t *testing.T) {
	for _, name := range []string{
		"dlock:fence:{acct}", "dlock:queue:{acct}", "dlock:forced:{acct}", "dlock:held:{acct}",
		"dlock:semaphore:{s}", "dlock:latch:{l}", "dlock:",
		"a\x1b]0;pwned\x07", "\x1b[2J", "a\nb", "a\rb", "a\x00", "a\x7f", "a\u009bb",
	} {
		if err := Validate(name); !errors.Is(err, ErrBadName) {
			t.Errorf("Validate(%q) = %v, want ErrBadName", name, err)
		}
	}
	// An election's lock is a Mutex of that name (the Election handle
	// makes it), and names that merely contain "dlock:" are the user's.
	for _, name := range []string{Companion(ElectionPrefix, "e"), Companion(ElectionPrefix, "a{b}"), "dlockx", "x:dlock:fence:{acct}", "DLOCK:fence:{a}", "ключ"} {
		if err := Validate(name); err != nil {
			t.Errorf("Validate(%q) = %v", name, err)
		}
	}
}
