package dlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// The semaphore's scripts with its slot MIGRATING and no key moved, as in
// migrate_grant_test.go. A semaphore script runs on the source only when
// its four keys are there at its start, and is then refused any key it
// emptied itself: the queue after popping its last entry, the seen set
// after removing its last member, the permits after reaping the last ones.
// Such a refusal used to abort the script with its earlier writes kept.

// sourceDo sends a command to the source; a key it does not have (it
// answers ASK while the slot migrates) reads as missing: nil.
func (m *migrationEnv) sourceDo(ctx context.Context, args ...any) (any, error) {
	v, err := m.from.Do(ctx, args...)
	if err != nil && strings.HasPrefix(err.Error(), "ASK ") {
		return nil, nil
	}
	return v, err
}

// mustDo sends a command to the source and fails the test on an error.
func (m *migrationEnv) mustDo(t *testing.T, ctx context.Context, args ...any) any {
	t.Helper()
	v, err := m.from.Do(ctx, args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

// serverTime is the source's clock (TIME): seconds and microseconds.
func (m *migrationEnv) serverTime(t *testing.T, ctx context.Context) (sec, usec int64) {
	t.Helper()
	tv := m.mustDo(t, ctx, "TIME").([]any)
	sec, _ = strconv.ParseInt(tv[0].(string), 10, 64)
	usec, _ = strconv.ParseInt(tv[1].(string), 10, 64)
	return sec, usec
}

// allExpire fails the test when one of keys on the source has no TTL.
func (m *migrationEnv) allExpire(t *testing.T, ctx context.Context, keys ...string) {
	t.Helper()
	for _, k := range keys {
		v, err := m.sourceDo(ctx, "PTTL", k)
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		if n, _ := v.(int64); n == -1 {
			t.Fatalf("%s has no TTL", k)
		}
	}
}

// semZset is a sorted set on the source: member -> score.
func (m *migrationEnv) semZset(t *testing.T, ctx context.Context, key string) map[string]float64 {
	t.Helper()
	v, err := m.sourceDo(ctx, "ZRANGE", key, 0, -1, "WITHSCORES")
	if err != nil {
		t.Fatalf("ZRANGE %s on %s: %v", key, m.from.Addr(), err)
	}
	l, _ := v.([]any)
	out := map[string]float64{}
	for i := 0; i+1 < len(l); i += 2 {
		f, err := strconv.ParseFloat(l[i+1].(string), 64)
		if err != nil {
			t.Fatalf("score %q in %s: %v", l[i+1], key, err)
		}
		out[l[i].(string)] = f
	}
	return out
}

// semQueue is the semaphore's queue on the source.
func (m *migrationEnv) semQueue(t *testing.T, ctx context.Context, sk keys.SemaphoreSet) []string {
	t.Helper()
	v, err := m.sourceDo(ctx, "LRANGE", sk.Queue, 0, -1)
	if err != nil {
		t.Fatalf("LRANGE the queue on %s: %v", m.from.Addr(), err)
	}
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		out = append(out, e.(string))
	}
	return out
}

// semAllExpire fails the test when one of the semaphore's keys on the
// source has no TTL.
func (m *migrationEnv) semAllExpire(t *testing.T, ctx context.Context, sk keys.SemaphoreSet) {
	t.Helper()
	m.allExpire(t, ctx, sk.Permits, sk.Size, sk.Queue, sk.Seen)
}

// permitWeight is the weight of permit id (keys.PermitID).
func permitWeight(id string) int {
	if i := strings.LastIndexByte(id, '#'); i >= 0 {
		if k, err := strconv.Atoi(id[i+1:]); err == nil && k > 0 {
			return k
		}
	}
	return 1
}

type acquired struct {
	p   *Permit
	err error
}

func acquireAsync(ctx context.Context, s *Semaphore, n int) <-chan acquired {
	got := make(chan acquired, 1)
	go func() {
		p, err := s.AcquireN(ctx, n, time.Hour, 0)
		got <- acquired{p, err}
	}()
	return got
}

func awaitPermit(t *testing.T, got <-chan acquired, within time.Duration, msg string) *Permit {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.p
	case <-time.After(within):
		t.Fatal(msg)
	}
	return nil
}

// semWaitQueue waits until the semaphore's queue on the source has n entries.
func (m *migrationEnv) semWaitQueue(t *testing.T, ctx context.Context, sk keys.SemaphoreSet, n int) {
	t.Helper()
	waitFor(t, "the semaphore's waiters to queue", func() bool {
		v, err := m.sourceDo(ctx, "LLEN", sk.Queue)
		return err == nil && v == int64(n)
	})
}

// TestMigratingSlotSemaphoreRelease: three permits, a holds two, b one, w
// waits for one. a's release mid-migration grants w, which empties the
// queue, and grant_queued then went back to the queue for the next waiter:
// refused, the script failed after it had granted w and told it, with a's
// permit left in the set (until its lease ended) and a's Release failing.
// Now a's Release succeeds, the set holds b's and w's permits alone (three
// permits at most), and w gets its permit once the slot settles (its
// claim declares the queue, which the grant emptied).
func TestMigratingSlotSemaphoreRelease(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	m := newMigrationEnv(cl, "{mig:sr}sem")
	sk := keys.Semaphore(m.name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := migrationOpts(WithShardedPubSub(ShardedAuto))
	a, b, w := m.client(t, opts), m.client(t, opts), m.client(t, opts)
	pa, err := a.Semaphore(m.name, 3).AcquireN(ctx, 2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.Semaphore(m.name, 3).Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	gotW := acquireAsync(wctx, w.Semaphore(m.name, 3), 1)
	m.semWaitQueue(t, ctx, sk, 1)

	m.migrate(t, ctx)
	if err := pa.Release(ctx); err != nil {
		t.Errorf("a's Release mid-migration: %v", err)
	}
	perms := m.semZset(t, ctx, sk.Permits)
	if _, ok := perms[pa.ID()]; ok {
		t.Fatalf("a's permit %q is still in the set after its Release: %v", pa.ID(), perms)
	}
	if _, ok := perms[pb.ID()]; !ok || len(perms) != 2 {
		t.Fatalf("after a's Release the permits are %v, want b's (%q) and w's", perms, pb.ID())
	}
	held := 0
	for id := range perms {
		held += permitWeight(id)
	}
	if held != 2 {
		t.Fatalf("after a's Release %d permits are held (%v), want 2", held, perms)
	}
	if q := m.semQueue(t, ctx, sk); len(q) != 0 {
		t.Fatalf("after the grant to w the queue is %q, want none", q)
	}
	m.settle(t)
	pw := awaitPermit(t, gotW, 30*time.Second, "w was not given the permit a released")
	if _, ok := perms[pw.ID()]; !ok {
		t.Fatalf("w's permit %q is not the one granted (%v)", pw.ID(), perms)
	}
	m.semAllExpire(t, ctx, sk)
	for _, p := range []*Permit{pb, pw} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := a.Semaphore(m.name, 3).Available(ctx); n != 3 || err != nil {
		t.Fatalf("Available after every Release = %d, %v; want 3", n, err)
	}
}

// TestMigratingSlotSemaphoreBlockedHead: three permits held one each by a,
// b and c; w waits for two. a's release frees one, too few for w, whose
// entry grant_queued pops and pushes back: the pop emptied the queue and
// the push, which would make it anew, was refused, failing a's Release
// with its permit kept. Now a's Release succeeds; w's entry is out of the
// queue (the node cannot make the queue anew) and w is woken: its next
// attempt queues it again once the slot settles, and b's release then
// grants it both permits, never more than three held.
func TestMigratingSlotSemaphoreBlockedHead(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	m := newMigrationEnv(cl, "{mig:sb}sem")
	sk := keys.Semaphore(m.name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := migrationOpts(WithShardedPubSub(ShardedAuto))
	a, b, c, w := m.client(t, opts), m.client(t, opts), m.client(t, opts), m.client(t, opts)
	var ps []*Permit
	for _, x := range []*Client{a, b, c} {
		p, err := x.Semaphore(m.name, 3).Acquire(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	pa, pb, pc := ps[0], ps[1], ps[2]
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	gotW := acquireAsync(wctx, w.Semaphore(m.name, 3), 2)
	m.semWaitQueue(t, ctx, sk, 1)

	m.migrate(t, ctx)
	if err := pa.Release(ctx); err != nil {
		t.Errorf("a's Release mid-migration: %v", err)
	}
	perms := m.semZset(t, ctx, sk.Permits)
	if _, ok := perms[pa.ID()]; ok || len(perms) != 2 {
		t.Fatalf("after a's Release the permits are %v, want b's and c's alone", perms)
	}
	m.settle(t)
	// w's next attempt, once the slot settles, queues it again.
	m.semWaitQueue(t, ctx, sk, 1)
	select {
	case r := <-gotW:
		t.Fatalf("w's AcquireN returned with one permit free: %v, %v", r.p, r.err)
	default:
	}
	if err := pb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	pw := awaitPermit(t, gotW, 30*time.Second, "w was not given the permits b freed")
	if pw.N() != 2 {
		t.Fatalf("w holds %d permits, want 2", pw.N())
	}
	perms = m.semZset(t, ctx, sk.Permits)
	held := 0
	for id := range perms {
		held += permitWeight(id)
	}
	if _, ok := perms[pw.ID()]; !ok || held != 3 {
		t.Fatalf("with w's permit the set is %v, want c's and w's, three permits", perms)
	}
	m.semAllExpire(t, ctx, sk)
	for _, p := range []*Permit{pc, pw} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigratingSlotSemaphoreScripts runs the semaphore's scripts as they
// are, unsharded, on the source of a MIGRATING slot, on keys written by
// hand: the paths that the public API reaches only by timing (a waiter
// leaving at the right moment, permits that expired). Each case failed
// with "non local key" before, its earlier writes kept.
func TestMigratingSlotSemaphoreScripts(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	const long = 60000 // ms: every TTL and deadline the cases write
	type zs = map[string]float64
	for _, tc := range []struct {
		name, script string
		// The keys as written before the migration: permits (id -> expiry,
		// 1 for expired, else now + long), size, queue, seen (entry ->
		// deadline, now + long).
		permits    zs
		size       int
		queue      []string
		args       []any
		want       string // the reply, fmt'd; an error's prefix
		wantPerms  []string
		wantQueue  []string
		sendAgain  bool   // send the script again once the slot settles...
		wantSettle string // ...and want this reply
	}{
		{
			// The head waiter gives up; grant_queued grants the one behind
			// it, which empties the queue, and then pops again.
			name: "leave lets the next in", script: "sem_leave.lua",
			permits: zs{"h:1#2": 0}, size: 3,
			queue:     []string{"1 60000 w1:1#2", "2 60000 w2:1"},
			args:      []any{"1 60000 w1:1#2", "w1:1#2", long},
			want:      "0",
			wantPerms: []string{"h:1#2", "w2:1"},
		},
		{
			// A waiter leaves with a permit it was granted, the only one:
			// its removal emptied the set before the reap.
			name: "leave gives back the last permit", script: "sem_leave.lua",
			permits: zs{"g:1": 0}, size: 1,
			queue:     []string{"1 60000 w:1"},
			args:      []any{"", "g:1", long},
			want:      "1",
			wantPerms: []string{"w:1"},
		},
		{
			// Every permit expired: the reap emptied the set, and the
			// attempt went on to read it.
			name: "acquire after every permit expired", script: "sem_acquire.lua",
			permits: zs{"x:1": 1}, size: 2,
			queue:     []string{"1 60000 q:1"},
			args:      []any{"n:1", 2, long, "", long, long, "1"},
			want:      "[1 60000]",
			wantPerms: []string{"q:1", "n:1"},
		},
		{
			name: "resize after every permit expired", script: "sem_resize.lua",
			permits: zs{"x:1": 1}, size: 1,
			queue:     []string{"1 60000 q:1#2"},
			args:      []any{3, long, long},
			want:      "[1 2]",
			wantPerms: []string{"q:1#2"},
		},
		{
			// The caller is the head and does not fit: grant_queued popped
			// it, emptying the queue, and could not push it back. The
			// script now asks to be sent again, and the resend, once the
			// slot settles, queues the caller again.
			name: "acquire whose entry cannot go back", script: "sem_acquire.lua",
			permits: zs{"h:1#2": 0}, size: 3,
			queue:      []string{"1 60000 s:1#2"},
			args:       []any{"s:1#2", 3, long, "1 60000 s:1#2", long, long, "1"},
			want:       "TRYAGAIN",
			wantPerms:  []string{"h:1#2"},
			sendAgain:  true,
			wantSettle: "[0 ",
			wantQueue:  []string{"1 60000 s:1#2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "{mig:" + strings.ReplaceAll(tc.name, " ", "-") + "}sem"
			m := newMigrationEnv(cl, name)
			sk := keys.Semaphore(name)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			do := func(args ...any) any { t.Helper(); return m.mustDo(t, ctx, args...) }
			sec, _ := m.serverTime(t, ctx)
			now := sec * 1000
			for id, exp := range tc.permits {
				if exp == 0 {
					exp = float64(now + long)
				}
				do("ZADD", sk.Permits, exp, id)
			}
			do("SET", sk.Size, tc.size)
			for _, e := range tc.queue {
				do("RPUSH", sk.Queue, e)
				do("ZADD", sk.Seen, now+long, e)
			}
			for _, k := range []string{sk.Permits, sk.Size, sk.Queue, sk.Seen} {
				do("PEXPIRE", k, long)
			}
			src := kind.Source("sem_lib.lua") + kind.Source(tc.script)
			run := func() (string, error) {
				args := append([]any{"EVAL", src, 4, sk.Permits, sk.Size, sk.Queue, sk.Seen}, tc.args...)
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
			case err == nil && got != tc.want:
				t.Fatalf("%s mid-migration = %s, want %s", tc.script, got, tc.want)
			}
			perms := m.semZset(t, ctx, sk.Permits)
			if len(perms) != len(tc.wantPerms) {
				t.Fatalf("permits %v, want %v", perms, tc.wantPerms)
			}
			held := 0
			for _, id := range tc.wantPerms {
				if _, ok := perms[id]; !ok {
					t.Fatalf("permits %v, want %v", perms, tc.wantPerms)
				}
				held += permitWeight(id)
			}
			if held > max(tc.size, 3) {
				t.Fatalf("%d permits held (%v)", held, perms)
			}
			m.semAllExpire(t, ctx, sk)
			if tc.sendAgain {
				m.settle(t)
				got, err := run()
				if err != nil || !strings.HasPrefix(got, tc.wantSettle) {
					t.Fatalf("%s sent again after the slot settled = %s, %v; want %s...", tc.script, got, err, tc.wantSettle)
				}
			}
			if q := m.semQueue(t, ctx, sk); strings.Join(q, "|") != strings.Join(tc.wantQueue, "|") {
				t.Fatalf("queue %q, want %q", q, tc.wantQueue)
			}
			m.semAllExpire(t, ctx, sk)
		})
	}
}

// fmtReply prints a script's reply: an integer, or integers in brackets.
func fmtReply(v any) string {
	switch x := v.(type) {
	case []any:
		s := make([]string, len(x))
		for i, e := range x {
			s[i] = fmtReply(e)
		}
		return "[" + strings.Join(s, " ") + "]"
	case int64:
		return strconv.FormatInt(x, 10)
	case string:
		return x
	}
	return "?"
}
