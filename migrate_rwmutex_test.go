package dlock

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/testenv"
	"github.com/dlock-dev/dlock/internal/wire"
)

// The read-write lock's scripts with its slot MIGRATING and no key moved,
// as in migrate_grant_test.go. A script runs on the source only when its
// five keys (the hash, the fencing counter, the read deadlines, the waiting
// writers, the forced set) are there at its start, and is then refused any
// key it emptied itself: rw_purge empties the deadline set and the waiting
// writers, and deletes the hash, when every entry in them has expired, and
// rwunlock's ZREM of the caller's deadline may empty the deadline set. Such
// a refusal used to abort the script with its earlier writes kept.

// rwKeys are the keys every read-write script declares, in their order.
func rwKeys(ks keys.Set) []string {
	return []string{ks.Lock, ks.Fence, ks.Readers, ks.Writers, ks.Forced}
}

// rwAllExpire fails the test when one of the read-write lock's keys on the
// source has no TTL.
func (m *migrationEnv) rwAllExpire(t *testing.T, ctx context.Context) {
	t.Helper()
	m.allExpire(t, ctx, rwKeys(m.ks)...)
}

// rwHash is the lock hash on the source, its fields joined sorted:
// "field=value ...", "" when it is not there.
func (m *migrationEnv) rwHash(t *testing.T, ctx context.Context) string {
	t.Helper()
	v, err := m.sourceDo(ctx, "HGETALL", m.name)
	if err != nil {
		t.Fatalf("HGETALL on %s: %v", m.from.Addr(), err)
	}
	l, _ := v.([]any)
	var out []string
	for i := 0; i+1 < len(l); i += 2 {
		out = append(out, l[i].(string)+"="+l[i+1].(string))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// hashOf is how rwHash prints a hash of these fields and values.
func hashOf(kv ...string) string {
	var out []string
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, kv[i]+"="+kv[i+1])
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// members are a sorted set's members on the source, joined sorted.
func (m *migrationEnv) members(t *testing.T, ctx context.Context, key string) string {
	t.Helper()
	var out []string
	for k := range m.semZset(t, ctx, key) {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestMigratingSlotRWScripts runs the read-write lock's scripts as they are,
// unsharded, on the source of a MIGRATING slot, on keys written by hand:
// states the public API reaches only by timing (holds and waiting writers
// whose deadlines passed just then) or with Redisson's readers beside
// dlock's (their fields have no deadline). Each case failed with "non local
// key" before, its earlier writes kept.
func TestMigratingSlotRWScripts(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	const long = 60000 // ms: every TTL and live deadline the cases write
	const dead = 1     // a deadline long passed
	// An argument that stands for the counter's value, a token issued last.
	const tokenNow = "{token}"
	type zs = map[string]int64
	for _, tc := range []struct {
		name, script string
		hash         []string // field, value, ...
		readers      zs       // deadlines: dead, or 0 for now + long
		writers      zs       // as readers
		args         []any
		want         string // the reply, fmt'd; an error's prefix
		// The keys after the script: the hash (rwHash), the deadline set's
		// and the waiting writers' members (members).
		wantHash, wantReaders, wantWriters string
		sendAgain                          bool   // send the script again once the slot settles...
		wantSettle                         string // ...and want this reply's prefix
	}{
		{
			// An evicted reader's deadline (ForceUnlock leaves it) passed
			// while a writer held: rw_purge emptied the deadline set, and
			// the writer's Unlock then took its own deadline out of it:
			// refused after the HDEL, the hash was left naming nobody, in
			// write mode, and nobody was told.
			name: "unlock after the deadlines expired", script: "rwunlock.lua",
			hash:    []string{"mode", "write", "w:1:write", "1"},
			readers: zs{"ghost:1": dead}, writers: zs{"x:1": 0},
			args:        []any{"w:1:write", 1, "0", "w", 1, long},
			want:        "[1 0]",
			wantWriters: "x:1",
		},
		{
			// A dlock reader leaves a Redisson reader (no deadline) behind:
			// its ZREM emptied the set, and rw_shrink read it after the
			// release was done.
			name: "runlock beside an untracked reader", script: "rwunlock.lua",
			hash:    []string{"mode", "read", "r:1", "1", "redisson:1", "1"},
			readers: zs{"r:1": 0}, writers: zs{"x:1": 0},
			args:        []any{"r:1", 1, "0", "r", 1, long},
			want:        "[1 0]",
			wantHash:    "mode=read redisson:1=1",
			wantWriters: "x:1",
		},
		{
			// A writer whose read hold has no deadline (a Redisson
			// downgrade) releases the write side: the hash was set to read
			// mode and rw_shrink then aborted the script, so the message
			// that lets readers in was never sent.
			name: "unlock of a downgraded writer", script: "rwunlock.lua",
			hash:    []string{"mode", "write", "w:1:write", "1", "w:1", "1"},
			readers: zs{"w:1:write": 0}, writers: zs{"x:1": 0},
			args:        []any{"w:1:write", 1, "0", "w", 1, long},
			want:        "[1 0]",
			wantHash:    "mode=read w:1=1",
			wantWriters: "x:1",
		},
		{
			// The last reader's deadline passed before its RUnlock came:
			// rw_purge deleted the hash, and the release read it.
			name: "runlock after every hold expired", script: "rwunlock.lua",
			hash:    []string{"mode", "read", "r:1", "1"},
			readers: zs{"r:1": dead}, writers: zs{"x:1": 0},
			args:        []any{"r:1", 1, "0", "r", tokenNow, long},
			want:        "[0 0]", // GONE
			wantWriters: "x:1",
		},
		{
			// Every hold and every waiting writer expired: the reader
			// cannot make the hash anew on this node, so it writes nothing
			// and asks to be sent again, which once the slot settles
			// grants it.
			name: "rlock after every hold expired", script: "rlock.lua",
			hash:    []string{"mode", "read", "r:1", "1"},
			readers: zs{"r:1": dead}, writers: zs{"y:1": dead},
			args:       []any{"n:1", "n:1:write", long, 0, long},
			want:       "TRYAGAIN",
			sendAgain:  true,
			wantSettle: "[1 1 ",
		},
		{
			// The hash is kept by a Redisson reader, but the deadline set
			// and the waiting writers were emptied: the new reader's
			// deadline cannot go in, and nothing else is written.
			name: "rlock after every deadline expired", script: "rlock.lua",
			hash:    []string{"mode", "read", "r:1", "1", "redisson:1", "1"},
			readers: zs{"r:1": dead}, writers: zs{"y:1": dead},
			args:       []any{"n:1", "n:1:write", long, 0, long},
			want:       "TRYAGAIN",
			wantHash:   "mode=read redisson:1=1",
			sendAgain:  true,
			wantSettle: "[1 1 ",
		},
		{
			name: "lock after every hold expired", script: "rwlock.lua",
			hash:    []string{"mode", "read", "r:1", "1"},
			readers: zs{"r:1": dead}, writers: zs{"x:1": 0},
			args:        []any{"x:1", "x:1:write", long, 0, long, long},
			want:        "TRYAGAIN",
			wantWriters: "x:1",
			sendAgain:   true,
			wantSettle:  "[1 1 ",
		},
		{
			// A waiting writer re-checks after the only deadline passed
			// (an evicted reader's): rw_wait read the emptied set.
			name: "lock waits after the deadlines expired", script: "rwlock.lua",
			hash:    []string{"mode", "write", "v:1:write", "1"},
			readers: zs{"ghost:1": dead}, writers: zs{"x:1": 0},
			args:        []any{"x:1", "x:1:write", long, 0, long, long},
			want:        "[0 ",
			wantHash:    "mode=write v:1:write=1",
			wantWriters: "x:1",
		},
		{
			// Every waiting writer expired, the caller's entry too: it
			// cannot register again on this node.
			name: "lock registers after the waiters expired", script: "rwlock.lua",
			hash:    []string{"mode", "read", "r:1", "1"},
			readers: zs{"r:1": 0}, writers: zs{"x:1": dead},
			args:        []any{"x:1", "x:1:write", long, 0, long, long},
			want:        "TRYAGAIN",
			wantHash:    "mode=read r:1=1",
			wantReaders: "r:1",
			sendAgain:   true,
			wantSettle:  "[0 ",
		},
		{
			// The last waiting writer gives up, the other one having
			// expired: its ZREM emptied the set, which the script then
			// counted.
			name: "leave of the last writer", script: "rwleave.lua",
			hash:    []string{"mode", "read", "r:1", "1"},
			readers: zs{"r:1": 0}, writers: zs{"x:1": 0, "y:1": dead},
			args:        []any{"x:1"},
			want:        "1",
			wantHash:    "mode=read r:1=1",
			wantReaders: "r:1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "{mig:" + strings.ReplaceAll(tc.name, " ", "-") + "}rw"
			m := newMigrationEnv(cl, name)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			do := func(args ...any) any { t.Helper(); return m.mustDo(t, ctx, args...) }
			sec, usec := m.serverTime(t, ctx)
			// The counter's value, and a release's token: a second ahead of
			// the clock, so that why_gone does not take the keys written
			// after TIME for a sequence begun after the token.
			now, tok := sec*1000, sec*1000000+usec+1000000
			do(append([]any{"HSET", m.name}, strs(tc.hash)...)...)
			for key, z := range map[string]zs{m.ks.Readers: tc.readers, m.ks.Writers: tc.writers} {
				for member, at := range z {
					if at == 0 {
						at = now + long
					}
					do("ZADD", key, at, member)
				}
			}
			// The counter as grants leave it (tok), and a forced set as
			// ForceUnlock leaves it.
			do("SET", m.ks.Fence, tok)
			do("SADD", m.ks.Forced, "evicted:1")
			for _, k := range rwKeys(m.ks) {
				do("PEXPIRE", k, long)
			}
			lib := kind.Source("lib.lua") + kind.Source("rwlib.lua")
			src := wire.WithLib(lib, kind.Source(tc.script))
			run := func() (string, error) {
				args := []any{"EVAL", src, 5}
				for _, k := range rwKeys(m.ks) {
					args = append(args, k)
				}
				for _, a := range tc.args {
					if a == tokenNow {
						a = tok
					}
					args = append(args, a)
				}
				v, err := m.from.Do(ctx, args...)
				if err != nil {
					return "", err
				}
				return strings.TrimSpace(fmtReply(v)), nil
			}

			m.migrate(t, ctx)
			got, err := run()
			switch {
			case err != nil && !strings.HasPrefix(err.Error(), tc.want):
				t.Fatalf("%s mid-migration: %v, want %s", tc.script, err, tc.want)
			case err == nil && !strings.HasPrefix(got, tc.want):
				t.Fatalf("%s mid-migration = %s, want %s", tc.script, got, tc.want)
			}
			if h := m.rwHash(t, ctx); h != tc.wantHash {
				t.Fatalf("hash %q, want %q", h, tc.wantHash)
			}
			if r := m.members(t, ctx, m.ks.Readers); r != tc.wantReaders {
				t.Fatalf("deadlines %q, want %q", r, tc.wantReaders)
			}
			if w := m.members(t, ctx, m.ks.Writers); w != tc.wantWriters {
				t.Fatalf("waiting writers %q, want %q", w, tc.wantWriters)
			}
			m.rwAllExpire(t, ctx)
			if tc.sendAgain {
				m.settle(t)
				got, err := run()
				if err != nil || !strings.HasPrefix(got, tc.wantSettle) {
					t.Fatalf("%s sent again after the slot settled = %s, %v; want %s...", tc.script, got, err, tc.wantSettle)
				}
				m.rwAllExpire(t, ctx)
			}
		})
	}
}

func strs(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

// TestMigratingSlotRWUnlock: a writer holds; a reader that ForceUnlock
// evicted left its deadline in the deadline set (force.lua deletes only the
// hash), and a writer x and a reader rd wait. The evicted reader's lease is
// short and fixed (it stands in for a crash), and it ends while the slot
// migrates: the waiters' re-checks, which sleep until that deadline, find
// it passed, and rw_purge empties the deadline set. The re-check then read
// the emptied set (rw_wait) and was refused: the waiter's Lock or RLock
// failed with "non local key" (and a release coming first failed the same
// way after its HDEL, its message unsent). Now the re-checks go on waiting;
// w's Unlock, sent mid-migration, succeeds once the slot settles (Redis
// itself answers TRYAGAIN while the emptied set is missing on the source),
// x gets the write side (it holds readers back), then rd the read side, one
// after the other, and every key keeps a TTL.
func TestMigratingSlotRWUnlock(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	m := newMigrationEnv(cl, "{mig:rwu}rw")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := migrationOpts(WithShardedPubSub(ShardedAuto))
	r, f, w, x, rd := m.client(t, opts), m.client(t, opts), m.client(t, opts), m.client(t, opts), m.client(t, opts)

	// Long enough for the setup to finish before it ends (checked).
	const readerLease = 6 * time.Second
	rr := r.RWMutex(m.name)
	if ok, err := rr.TryRLock(ctx, 0, readerLease); !ok || err != nil {
		t.Fatalf("the reader's TryRLock = %v, %v", ok, err)
	}
	if ok, err := f.Mutex(m.name).ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	if d := m.members(t, ctx, m.ks.Readers); d != rr.r.Owner() {
		t.Fatalf("deadlines after the force %q, want the evicted reader's %q", d, rr.r.Owner())
	}
	ww := w.RWMutex(m.name)
	if err := ww.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wTok := ww.Token()
	xw, rdw := x.RWMutex(m.name), rd.RWMutex(m.name)
	gotX, gotRD := make(chan error, 1), make(chan error, 1)
	go func() { gotX <- xw.Lock(ctx) }()
	go func() { gotRD <- rdw.RLock(ctx) }()
	waitFor(t, "x to wait as a writer", func() bool {
		return len(m.semZset(t, ctx, m.ks.Writers)) == 1
	})

	m.migrate(t, ctx)
	if d := m.members(t, ctx, m.ks.Readers); d != rr.r.Owner() {
		t.Fatalf("the evicted reader's deadline was gone before the migration (%q): a slow setup, give it a longer lease", d)
	}
	// The evicted reader's deadline passes; a waiter's re-check purges it,
	// emptying the set (gone from the source).
	waitFor(t, "the evicted reader's deadline to be purged", func() bool {
		return m.members(t, ctx, m.ks.Readers) == ""
	})
	if h := m.rwHash(t, ctx); h != hashOf("mode", "write", ww.w.Owner(), "1") {
		t.Fatalf("hash mid-migration %q, want w's write hold alone", h)
	}
	m.rwAllExpire(t, ctx)
	unlocked := make(chan error, 1)
	go func() { unlocked <- ww.Unlock(ctx) }()
	select {
	case err := <-gotX:
		t.Fatalf("x's Lock returned mid-migration: %v", err)
	case err := <-gotRD:
		t.Fatalf("rd's RLock returned mid-migration: %v", err)
	case err := <-unlocked:
		// Only once the slot settles: the source answers TRYAGAIN while
		// the deadline set is missing there.
		t.Fatalf("w's Unlock returned mid-migration: %v", err)
	case <-time.After(time.Second):
	}

	m.settle(t)
	awaitNil(t, unlocked, 30*time.Second, "w's Unlock did not return once the slot settled")
	awaitNil(t, gotX, 30*time.Second, "x did not get the write side w released")
	if h := m.rwHash(t, ctx); h != hashOf("mode", "write", xw.w.Owner(), "1") {
		t.Fatalf("hash with x's hold %q, want x's write hold alone", h)
	}
	if xw.Token() <= wTok {
		t.Fatalf("x's token %d after w's %d", xw.Token(), wTok)
	}
	select {
	case err := <-gotRD:
		t.Fatalf("rd's RLock returned while x holds the write side: %v", err)
	default:
	}
	m.rwAllExpire(t, ctx)
	if err := xw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	awaitNil(t, gotRD, 30*time.Second, "rd did not get the read side x released")
	if h := m.rwHash(t, ctx); h != hashOf("mode", "read", rdw.r.Owner(), "1") {
		t.Fatalf("hash with rd's hold %q, want rd's read hold alone", h)
	}
	m.rwAllExpire(t, ctx)
	if err := rdw.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMigratingSlotRWRUnlockBesideRedisson: a dlock reader and a Redisson
// reader share the read side (Redisson keeps its reader's expiry in a key
// of its own, so its field has no deadline in dlock's set), and a writer x
// waits. The dlock reader's RUnlock, mid-migration, takes its deadline out
// of the set, emptying it, and rw_shrink then counted the set: refused,
// after the release had been done, RUnlock failed. Now it succeeds, the
// Redisson reader holds the read side alone, x keeps waiting, and once the
// Redisson reader leaves (by hand, as Redisson does: the hash deleted and
// its unlock message sent) and the slot settles, x gets the write side.
func TestMigratingSlotRWRUnlockBesideRedisson(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	m := newMigrationEnv(cl, "{mig:rwr}rw")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := migrationOpts(WithShardedPubSub(ShardedOff))
	x0, f, r, x := m.client(t, opts), m.client(t, opts), m.client(t, opts), m.client(t, opts)
	leaveForced(t, ctx, x0, f, m.name)
	rr := r.RWMutex(m.name)
	if err := rr.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.from.Do(ctx, "HSET", m.name, javaOwner, 1); err != nil {
		t.Fatal(err)
	}
	xw := x.RWMutex(m.name)
	gotX := make(chan error, 1)
	go func() { gotX <- xw.Lock(ctx) }()
	waitFor(t, "x to wait as a writer", func() bool {
		return len(m.semZset(t, ctx, m.ks.Writers)) == 1
	})

	m.migrate(t, ctx)
	if err := rr.RUnlock(ctx); err != nil {
		t.Errorf("the dlock reader's RUnlock mid-migration: %v", err)
	}
	if h := m.rwHash(t, ctx); h != hashOf("mode", "read", javaOwner, "1") {
		t.Fatalf("hash after the RUnlock %q, want the Redisson reader alone", h)
	}
	if d := m.members(t, ctx, m.ks.Readers); d != "" {
		t.Fatalf("deadlines after the RUnlock %q, want none", d)
	}
	m.rwAllExpire(t, ctx)
	select {
	case err := <-gotX:
		t.Fatalf("x's Lock returned beside a reader: %v", err)
	default:
	}
	// The Redisson reader leaves.
	if _, err := m.from.Do(ctx, "DEL", m.name); err != nil {
		t.Fatal(err)
	}
	if _, err := m.from.Do(ctx, "PUBLISH", m.ks.RWChannel, "0"); err != nil {
		t.Fatal(err)
	}
	m.settle(t)
	awaitNil(t, gotX, 30*time.Second, "x did not get the write side once the readers left")
	if h := m.rwHash(t, ctx); h != hashOf("mode", "write", xw.w.Owner(), "1") {
		t.Fatalf("hash with x's hold %q, want x's write hold alone", h)
	}
	m.rwAllExpire(t, ctx)
	if err := xw.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
