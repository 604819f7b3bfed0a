package keys

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSlotKnownValues(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	cases := map[string]uint16{
		"123456789":            12739, // CRC16/XMODEM check value 0x31C3 % 16384
		"foo":                  12182,
		"{user1000}.following": Slot("user1000"),
		"foo{}{bar}":           Slot("foo{}{bar}"),
	}
	for k, want := range cases {
		if got := Slot(k); got != want {
			t.Errorf("Slot(%q) = %d, want %d", k, got, want)
		}
	}
	if Slot("{user1000}.following") != Slot("{user1000}.followers") {
		t.Error("keys with the same hash tag must share a slot")
	}
}

func TestCompanionSharesSlot(t *testing.T) {
	for _, name := range []string{"coupon", "user:{42}:cart", "a{b", "{x}", "a{b}}", "lock with spaces", "ünïcode"} {
		if err := Validate(name); err != nil {
			t.Fatalf("Validate(%q): %v", name, err)
		}
		s := For(name)
		for _, k := range []string{s.Fence, s.Queue, s.Forced} {
			if Slot(k) != Slot(s.Lock) {
				t.Errorf("%q: companion %q in slot %d, lock in slot %d", name, k, Slot(k), Slot(s.Lock))
			}
		}
	}
}

func TestValidateRejects(t *testing.T) {
	for _, name := range []string{"", strings.Repeat("x", MaxNameLen+1), "a}b", "\xff", "a{}b}", "a{}b{c"} {
		if err := Validate(name); !errors.Is(err, ErrBadName) {
			t.Errorf("Validate(%q) = %v, want ErrBadName", name, err)
		}
	}
}

func FuzzCompanion(f *testing.F) {
	for _, s := range []string{"coupon", "a{b}c", "{", "}", "{}", "a{}b{c}d", "x{{y}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if Validate(name) != nil {
			return
		}
		s := For(name)
		for _, k := range []string{s.Fence, s.Queue, s.Forced} {
			if Slot(k) != Slot(s.Lock) {
				t.Fatalf("%q: companion %q not in the lock's slot", name, k)
			}
		}
		if s.Fence == s.Queue || s.Queue == s.Forced || s.Fence == s.Lock {
			t.Fatalf("%q: derived names collide", name)
		}
	})
}

// collidingFamilies are names whose companion keys were once derived to the
// same key ("X" and "{X}" both to dlock:queue:{X}): braces around a whole
// name, empty and nested tags, an unclosed brace, a name that reads like a
// grant box.
var collidingFamilies = [][]string{
	{"X", "{X}", "{X}}", "{{X}", "{X}:{X}"},
	{"a{b", "{a{b}", "{a{b}}"},
	{"user:{42}", "{42}", "42", "{42}:user:{42}", "user:{42}:{42}"},
	{"{}x{y}", "x{y}", "y", "{y}", "{}{y}"},
	{"{{}}", "{", "{{", "{{}"},
	// A name that ends like a grant box of another (GrantBox, field c:1).
	{"{a}", "{a}:g:c:1", "{a}}g:c:1", "a}g:c:1", "a", "{a}:{a}:g:c:1", "{a}\x1fg:c:1"},
}

func TestCompanionsDistinctAcrossNames(t *testing.T) {
	for _, fam := range collidingFamilies {
		seen := map[string]string{}
		for _, name := range fam {
			if err := Validate(name); err != nil {
				continue
			}
			s := For(name)
			for _, k := range []string{s.Fence, s.Queue, s.Forced, s.Readers, s.Writers, GrantBox(s.Queue, "c:1"), FenceStart(s.Fence)} {
				if prev, ok := seen[k]; ok {
					t.Errorf("names %q and %q share the companion key %q", prev, name, k)
				}
				seen[k] = name
				if Slot(k) != Slot(s.Lock) {
					t.Errorf("%q: companion %q not in the lock's slot", name, k)
				}
			}
		}
		if len(seen) < 2 {
			t.Errorf("family %q: fewer than two valid names, the test proves nothing", fam)
		}
	}
}

func FuzzCompanionsDistinct(f *testing.F) {
	f.Add("X", "{X}")
	f.Add("a{b", "{a{b}")
	f.Add("{x}y", "{x}")
	f.Add("{a}", "{a}:g:c:1")
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == b || Validate(a) != nil || Validate(b) != nil {
			return
		}
		if qa, qb := For(a).Queue, For(b).Queue; qa == qb {
			t.Fatalf("%q and %q share the queue %q", a, b, qa)
		}
		if box, qb := GrantBox(For(a).Queue, "c:1"), For(b).Queue; box == qb {
			t.Fatalf("%q's grant box is %q's queue %q", a, b, qb)
		}
	})
}

// Channels follow Redisson's prefixName, so a Redisson waiter hears dlock's
// releases also for names that carry their own hash tag.
func TestRedissonChannelNames(t *testing.T) {
	if got := For("coupon").Channel; got != "redisson_lock__channel:{coupon}" {
		t.Errorf("Channel = %q", got)
	}
	if got := For("user:{42}").Channel; got != "redisson_lock__channel:user:{42}" {
		t.Errorf("Channel for a tagged name = %q", got)
	}
	if got := For("a{b").RWChannel; got != "redisson_rwlock:a{b" {
		t.Errorf("RWChannel = %q", got)
	}
}

func TestForMutexAgreesWithFor(t *testing.T) {
	for _, name := range []string{"coupon", "user:{42}", "a{b", "{x}", "{}y", "é{ü}ö"} {
		want, got := For(name), ForMutex(name)
		if got.Lock != want.Lock || got.Fence != want.Fence || got.Queue != want.Queue || got.Forced != want.Forced {
			t.Errorf("ForMutex(%q) = %+v, For has %+v", name, got, want)
		}
		if got.Channel != "" || got.Readers != "" {
			t.Errorf("ForMutex(%q) filled names a Mutex does not need: %+v", name, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = ForMutex("coupon") }); n != 1 {
		t.Errorf("ForMutex allocates %v times, want once", n)
	}
}

func TestPermitID(t *testing.T) {
	for _, tc := range []struct {
		owner string
		n     int
		id    string
	}{
		{"h/1/abc:7", 1, "h/1/abc:7"},
		{"h/1/abc:7", 3, "h/1/abc:7#3"},
		{"x:1#2:5", 1, "x:1#2:5"}, // a client id with '#' in it
		{"x:1#2:5", 12, "x:1#2:5#12"},
	} {
		id := PermitID(tc.owner, tc.n)
		if id != tc.id {
			t.Errorf("PermitID(%q, %d) = %q, want %q", tc.owner, tc.n, id, tc.id)
		}
		if n := PermitWeight(id); n != tc.n {
			t.Errorf("PermitWeight(%q) = %d, want %d", id, n, tc.n)
		}
	}
	for _, id := range []string{"", "#3", "a#3", "a:#3", "a:1#", "a:1#x", "a:1#0", "a:b#3"} {
		if n := PermitWeight(id); n != 1 {
			t.Errorf("PermitWeight(%q) = %d, want 1", id, n)
		}
	}
}

// A latch's count is its name and its channel Redisson's, which wraps the
// name in braces whatever it holds; the companion shares the count's slot.
func TestLatchNames(t *testing.T) {
	for name, channel := range map[string]string{
		"done":       "redisson_countdownlatch__channel__{done}",
		"job:{42}:x": "redisson_countdownlatch__channel__{job:{42}:x}",
	} {
		s := Latch(name)
		if s.Count != name || s.Channel != channel {
			t.Errorf("Latch(%q) = %+v, want count %q and channel %q", name, s, name, channel)
		}
		if Slot(s.Downs) != Slot(s.Count) || Slot(s.Marker) != Slot(s.Count) {
			t.Errorf("%q: %q or %q is not in the count's slot", name, s.Downs, s.Marker)
		}
		if n, ok := NameFromCompanion(LatchDownsPrefix, s.Downs); !ok || n != name {
			t.Errorf("NameFromCompanion(%q) = %q, %v", s.Downs, n, ok)
		}
		if n, ok := NameFromCompanion(LatchPrefix, s.Marker); !ok || n != name {
			t.Errorf("NameFromCompanion(%q) = %q, %v", s.Marker, n, ok)
		}
		if _, ok := NameFromCompanion(LatchPrefix, s.Downs); ok {
			t.Errorf("%q is read as a latch marker", s.Downs)
		}
	}
}

// Under a namespace every name begins with it, and every name of one lock
// (or election, semaphore, latch) shares the Cluster slot of its key.
func TestSpace(t *testing.T) {
	s, err := NewSpace("svc")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"coupon", "user:{42}", "a{b"} {
		f := s.For(name)
		m := s.ForMutex(name)
		if f.Lock != "svc:"+name || m.Lock != f.Lock || m.Fence != f.Fence || m.Queue != f.Queue || m.Forced != f.Forced {
			t.Fatalf("%q: For %+v, ForMutex %+v", name, f, m)
		}
		e, sem, l := s.Election(name), s.Semaphore(name), s.Latch(name)
		for _, group := range [][]string{
			{f.Lock, f.Fence, f.Queue, f.Forced, f.Readers, f.Writers, s.Held(f.Lock), s.ShardClientChannel("c", f.Lock)},
			{e.Lock, e.Changes},
			{sem.Permits, sem.Size, sem.Queue, sem.Seen, sem.Free},
			{l.Count, l.Downs},
		} {
			for _, k := range group {
				if !strings.HasPrefix(k, "svc:") {
					t.Errorf("%q: %q is outside the namespace", name, k)
				}
				if Slot(k) != Slot(group[0]) {
					t.Errorf("%q: %q is not in the slot of %q", name, k, group[0])
				}
			}
		}
		for _, ch := range []string{f.Channel, f.RWChannel, s.LockChannel(name), s.ClientChannel("c"), l.Channel} {
			if !strings.HasPrefix(ch, "svc:") {
				t.Errorf("%q: channel %q is outside the namespace", name, ch)
			}
		}
		if n, ok := s.NameFromCompanion("dlock:fence", f.Fence); !ok || n != name {
			t.Errorf("NameFromCompanion(%q) = %q, %v", f.Fence, n, ok)
		}
		if !s.IsClientChannel(s.ShardClientChannel("c", f.Lock), "c") || !s.IsClientChannel(s.ClientChannel("c"), "c") {
			t.Errorf("%q: client channels not recognised", name)
		}
	}
	for _, bad := range []string{"", "a b", "a{", "x*"} {
		if _, err := NewSpace(bad); err == nil {
			t.Errorf("NewSpace(%q) accepted", bad)
		}
	}
}

// The start kept beside a fencing counter is in the counter's SCAN match
// (dlock:fence:*), and must not be listed as a lock of its own.
func TestFenceStartIsNoCompanion(t *testing.T) {
	for _, name := range []string{"x", "{x}", "user:{42}", "a:b"} {
		k := FenceStart(For(name).Fence)
		if n, ok := NameFromCompanion("dlock:fence", k); ok {
			t.Errorf("NameFromCompanion(dlock:fence, %q) = %q: a lock", k, n)
		}
		if n, ok := NameFromCompanion("dlock:fence", For(name).Fence); !ok || n != name {
			t.Errorf("NameFromCompanion(dlock:fence, %q) = %q, %v; want %q", For(name).Fence, n, ok, name)
		}
	}
}
