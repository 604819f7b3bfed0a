package keys

import (
	"strings"
	"testing"
)

// hostileNames are lock names built to trip the hash-tag rule: every
// string of up to 5 bytes over '{', '}', 'a' and ':' (those Validate
// accepts), and a table of longer ones.
func hostileNames(t *testing.T) []string {
	t.Helper()
	names := []string{
		"a{b", "{", "a{", "{{", "x{y:z", "{t}x", "x{t}", "{t}", "a{b}c", "{{t}}", "{t}}",
		"a{b{c", "a{b{c}d", "{a}{b}", "user:{42}:lock", "{ключ}x", "ключ{", "{}}{x}",
		"dlock:election:{a{b}", "redisson_lock__channel:{x}",
	}
	alphabet := "{}a:"
	var grow func(prefix string)
	grow = func(prefix string) {
		if prefix != "" {
			names = append(names, prefix)
		}
		if len(prefix) == 5 {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			grow(prefix + alphabet[i:i+1])
		}
	}
	grow("")
	valid := names[:0]
	for _, n := range names {
		if Validate(n) == nil {
			valid = append(valid, n)
		}
	}
	if len(valid) < 200 {
		t.Fatalf("only %d valid hostile names", len(valid))
	}
	return valid
}

// Every channel a sharded script publishes on must be in the slot of its
// first key (a script's SPUBLISH to another slot is refused), and
// ShardChannel keeps Redisson's channel whenever it already is there.
func TestShardChannelInKeySlot(t *testing.T) {
	ns, err := NewSpace("ns")
	if err != nil {
		t.Fatal(err)
	}
	standIns := map[string]int{}
	for _, s := range []Space{{}, ns} {
		for _, name := range hostileNames(t) {
			set, latch, sem, el := s.For(name), s.Latch(name), s.Semaphore(name), s.Election(name)
			for _, c := range []struct {
				what, channel, key string
			}{
				{"lock channel", s.LockChannel(name), set.Lock},
				{"lock channel (Set)", set.Channel, set.Lock},
				{"read-write lock channel", set.RWChannel, set.Lock},
				{"latch channel", latch.Channel, latch.Count},
				{"semaphore free channel", sem.Free, sem.Permits},
				{"election changes", el.Changes, el.Lock},
				{"election lock channel", s.LockChannel(el.Lock[len(s.Prefix()):]), el.Lock},
				{"client channel", s.ShardClientChannel("host/1/0123456789abcdef", set.Lock), set.Lock},
				{"client channel of a semaphore", s.ShardClientChannel("c{x}", sem.Permits), sem.Permits},
			} {
				got := s.ShardChannel(c.channel, c.key)
				if Slot(got) != Slot(c.key) {
					t.Errorf("ns %q name %q: %s %q (sharded %q) is in slot %d, its key %q in %d",
						s.Prefix(), name, c.what, c.channel, got, Slot(got), c.key, Slot(c.key))
				}
				if !strings.HasPrefix(got, s.Prefix()) {
					t.Errorf("ns %q name %q: %s %q leaves the namespace", s.Prefix(), name, c.what, got)
				}
				if same := Hashed(c.channel) == Hashed(c.key); same != (got == c.channel) {
					t.Errorf("ns %q name %q: %s %q became %q; the channel itself must be kept exactly when it is in its key's slot",
						s.Prefix(), name, c.what, c.channel, got)
				}
				if again := s.ShardChannel(got, c.key); again != got {
					t.Errorf("ShardChannel is not idempotent: %q, then %q", got, again)
				}
				if got != c.channel {
					standIns[c.what]++
				}
			}
		}
	}
	// The known cases need a stand-in; the others never do.
	for _, what := range []string{"lock channel", "read-write lock channel", "latch channel"} {
		if standIns[what] == 0 {
			t.Errorf("no %s needed a stand-in: the table misses the hostile names", what)
		}
	}
	for _, what := range []string{"semaphore free channel", "election changes", "election lock channel", "client channel"} {
		if standIns[what] != 0 {
			t.Errorf("%d %ss needed a stand-in", standIns[what], what)
		}
	}
	t.Logf("stand-ins: %v", standIns)
}

// The stand-ins of distinct channels are distinct, and none is a channel
// of another kind.
func TestShardChannelStandInsDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, name := range hostileNames(t) {
		for _, c := range [][2]string{
			{LockChannel(name), name},
			{For(name).RWChannel, name},
			{LatchChannel(name), name},
		} {
			got := ShardChannel(c[0], c[1])
			if prev, ok := seen[got]; ok && prev != c[0] {
				t.Fatalf("%q and %q share the sharded channel %q", prev, c[0], got)
			}
			seen[got] = c[0]
			if got != c[0] && !strings.HasPrefix(got, ShardChannelPrefix+"{") {
				t.Fatalf("stand-in %q of %q", got, c[0])
			}
		}
	}
}

// The cases of the bug report, spelled out.
func TestShardChannelExamples(t *testing.T) {
	for _, c := range []struct{ channel, key, want string }{
		{LockChannel("a{b"), "a{b", "dlock:shard:{a{b}:redisson_lock__channel:a{b"},
		{LatchChannel("{t}x"), "{t}x", "dlock:shard:{t}:redisson_countdownlatch__channel__{{t}x}"},
		{LockChannel("plain"), "plain", "redisson_lock__channel:{plain}"},
		{LockChannel("{t}x"), "{t}x", "redisson_lock__channel:{t}x"},
		{LatchChannel("a{b"), "a{b", "redisson_countdownlatch__channel__{a{b}"},
	} {
		if got := ShardChannel(c.channel, c.key); got != c.want {
			t.Errorf("ShardChannel(%q, %q) = %q, want %q", c.channel, c.key, got, c.want)
		}
	}
}
