package dlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// These tests put a lock's slot in the middle of a migration, MIGRATING on
// its master and IMPORTING on another, with none of its keys moved yet. A
// script runs on the source only when every key it declares is there at
// its start; from then on Redis 7.0 refuses it, as "non local key", every
// key the node does not have: the grant box of a popping waiter (a key no
// script declares, which never exists before a hand-off writes it), and a
// key the script itself deleted or emptied. A refusal used to abort the
// script part-way, its earlier writes kept.

// migrationEnv is one lock name whose slot the test migrates.
type migrationEnv struct {
	cl       *testenv.Cluster
	name     string
	ks       keys.Set
	slot     int
	from, to *testenv.Redis
	settled  bool
}

func newMigrationEnv(cl *testenv.Cluster, name string) *migrationEnv {
	m := &migrationEnv{cl: cl, name: name, ks: keys.For(name), slot: int(keys.Slot(name))}
	m.from = cl.SlotNode(m.slot)
	m.to = cl.Nodes()[0]
	if m.to == m.from {
		m.to = cl.Nodes()[1]
	}
	return m
}

// migrate sets the slot IMPORTING on the target and MIGRATING on the
// source, and moves no key; the slot settles when the test ends, if not
// before.
func (m *migrationEnv) migrate(t *testing.T, ctx context.Context) {
	t.Helper()
	fromID, err := testenv.NodeID(ctx, m.from)
	if err != nil {
		t.Fatal(err)
	}
	toID, err := testenv.NodeID(ctx, m.to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.to.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", fromID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.settle(t) })
	if _, err := m.from.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", toID); err != nil {
		t.Fatal(err)
	}
}

// settle ends the migration with the slot where it was.
func (m *migrationEnv) settle(t *testing.T) {
	if m.settled {
		return
	}
	m.settled = true
	for _, n := range []*testenv.Redis{m.to, m.from} {
		if _, err := n.Do(context.Background(), "CLUSTER", "SETSLOT", m.slot, "STABLE"); err != nil {
			t.Errorf("SETSLOT STABLE on %s: %v", n.Addr(), err)
		}
	}
}

// client is a dlock Client on a go-redis client of its own to the
// cluster, both closed when the test ends.
func (m *migrationEnv) client(t *testing.T, opts []Option) *Client {
	t.Helper()
	return newClientOn(t, m.cl.NewClient(t), opts...)
}

// queue is the lock's queue on the source.
func (m *migrationEnv) queue(t *testing.T, ctx context.Context) []string {
	t.Helper()
	v, err := m.from.Do(ctx, "LRANGE", m.ks.Queue, 0, -1)
	if err != nil {
		t.Fatalf("LRANGE the queue on %s: %v", m.from.Addr(), err)
	}
	var out []string
	for _, e := range v.([]any) {
		out = append(out, e.(string))
	}
	return out
}

// hash is the lock's hash on the source.
func (m *migrationEnv) hash(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	v, err := m.from.Do(ctx, "HGETALL", m.name)
	if err != nil {
		t.Fatalf("HGETALL on %s: %v", m.from.Addr(), err)
	}
	l, _ := v.([]any)
	h := map[string]string{}
	for i := 0; i+1 < len(l); i += 2 {
		h[l[i].(string)] = l[i+1].(string)
	}
	return h
}

// migrationOpts are the options of the tests' Clients besides the pub/sub
// mode. A long claim window, so that a slow machine cannot let a hand-off
// expire before it is claimed: the tests are about whether the waiter is
// told, not how fast. A long re-check (and a holder TTL as long, which
// also bounds a waiter's sleep) keeps a waiter that nobody told from
// finding its hand-off on its own within the tests' bounds. Waiters still
// pop (lease's canPop).
func migrationOpts(mode Option) []Option {
	return []Option{mode, WithHandoffClaim(time.Minute), WithWatchdogTimeout(2 * time.Minute), withRecheck(2 * time.Minute)}
}

// leaveForced makes the lock's forced set, which release.lua and force.lua
// declare, exist: a ForceUnlock leaves it behind for a day.
func leaveForced(t *testing.T, ctx context.Context, x, forcer *Client, name string) {
	t.Helper()
	xm := x.Mutex(name)
	if err := xm.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := forcer.Mutex(name).ForceUnlock(ctx); !ok || err != nil {
		t.Fatalf("ForceUnlock = %v, %v", ok, err)
	}
	if err := xm.Unlock(ctx); err != nil && !errors.Is(err, ErrForced) {
		t.Fatalf("the forced holder's Unlock: %v", err)
	}
}

// TestMigratingSlotHandoff: a hand-off to a popping waiter while the lock's
// slot migrates. The release's script runs on the source, but the waiter's
// box is refused there. That used to abort the script (first at the HSET
// that wrote the waiter into the hash it had just deleted, and, past that,
// at the box) after it had popped the waiter's entry: the releaser's
// Unlock failed though its release had happened, and the waiter was never
// told (its re-check, pushed out of the test's bound here, was all that
// could find it). Now the grant falls back to the waiter's client channel,
// and its next attempt claims it, while the slot still migrates.
//
// Three Clients besides the one whose hold is forced first: a holds, b
// waits first, c second; b and c pop (one Client each, so that the
// hand-off goes through Redis). c keeps the queue in existence, since b's
// claim declares it. Checked: a's Unlock succeeds; b gets the lock during
// the migration; the hash then names b alone, c still waits and its entry
// is still queued (no second holder, no waiter lost); b's Unlock, still
// mid-migration, succeeds too, and c gets the lock once the slot settles
// (its claim declares the queue, which b's hand-off emptied). Tokens grow.
//
// The "skipped" case puts an entry that is not a waiter's at the queue's
// head, so that the release hands the lock over in lib.lua's hand_off
// (which skips it) rather than in release.lua's inline common case.
func TestMigratingSlotHandoff(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	for _, tc := range []struct {
		name, lock string
		mode       Option
		skipped    bool
	}{
		{"sharded", "{mig:s}lock", WithShardedPubSub(ShardedAuto), false},
		{"classic", "{mig:c}lock", WithShardedPubSub(ShardedOff), false},
		{"skipped", "{mig:k}lock", WithShardedPubSub(ShardedAuto), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testMigratingSlotHandoff(t, newMigrationEnv(cl, tc.lock), migrationOpts(tc.mode), tc.skipped)
		})
	}
}

func testMigratingSlotHandoff(t *testing.T, m *migrationEnv, opts []Option, skipped bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, a, b, c := m.client(t, opts), m.client(t, opts), m.client(t, opts), m.client(t, opts)
	leaveForced(t, ctx, x, a, m.name)

	am, bm, cm := a.Mutex(m.name), b.Mutex(m.name), c.Mutex(m.name)
	if err := am.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tokA := am.Token()
	waiters := func(n int) {
		t.Helper()
		waitFor(t, "the waiters to queue", func() bool {
			i, err := a.Inspect(ctx, m.name)
			return err == nil && len(i.Waiters) == n
		})
	}
	// b and c each wait in a context of their own, ended when the test
	// ends so that no Lock outlives it.
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	gotB := lockAsync(bctx, bm)
	waiters(1)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	gotC := lockAsync(cctx, cm)
	waiters(2)
	q := m.queue(t, ctx)
	for i, e := range q {
		// keys.PopEntry: the TTL written with two leading zeros.
		if f := strings.SplitN(e, " ", 3); len(f) != 3 || !strings.HasPrefix(f[1], "00") {
			t.Fatalf("queue entry %d %q is not a popping waiter's", i, e)
		}
	}
	_, _, cField, ok := keys.ParseQueueEntry(q[1])
	if !ok {
		t.Fatalf("c's queue entry %q does not parse", q[1])
	}
	if skipped {
		if _, err := m.from.Do(ctx, "LPUSH", m.ks.Queue, "not a waiter's entry"); err != nil {
			t.Fatal(err)
		}
	}

	m.migrate(t, ctx)
	if err := am.Unlock(ctx); err != nil {
		// Not fatal: whether b is told is the other half of the check.
		t.Errorf("a's Unlock mid-migration: %v", err)
	}
	// The bound only detects a waiter that was never told.
	awaitNil(t, gotB, 30*time.Second, "b was not given the lock a released")
	tokB := bm.Token()
	if h := m.hash(t, ctx); len(h) != 1 || h[holderField(bm)] != "1" {
		t.Fatalf("after the hand-off to b the lock's hash is %v, want b's field %q alone", h, holderField(bm))
	}
	if q2 := m.queue(t, ctx); len(q2) != 1 || q2[0] != q[1] {
		t.Fatalf("after the hand-off to b the queue is %q, want c's entry %q alone", q2, q[1])
	}
	select {
	case err := <-gotC:
		t.Fatalf("c's Lock returned while b holds: %v", err)
	default:
	}
	if f := holderField(am); f != "" {
		t.Fatalf("a still names a hold (%q) after its Unlock", f)
	}

	// b's release hands the lock to c, still mid-migration: the script
	// runs, c's box is refused, and c is told. c's claim waits for the
	// slot: the queue is gone, so its script's keys are not all on the
	// source.
	if err := bm.Unlock(ctx); err != nil {
		t.Errorf("b's Unlock mid-migration: %v", err)
	}
	if h := m.hash(t, ctx); len(h) != 1 || h[cField] != "1" {
		t.Fatalf("after the hand-off to c the lock's hash is %v, want c's field %q alone", h, cField)
	}
	m.settle(t)
	awaitNil(t, gotC, 30*time.Second, "c was not given the lock b released")
	tokC := cm.Token()
	if !(tokA < tokB && tokB < tokC) {
		t.Fatalf("tokens %d (a), %d (b), %d (c) do not grow", tokA, tokB, tokC)
	}
	if err := cm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := am.IsLocked(ctx); l || err != nil {
		t.Fatalf("IsLocked after the last Unlock = %v, %v", l, err)
	}
}

// TestMigratingSlotReleaseEmptiesQueue: a release mid-migration whose
// queue holds only entries that are not waiters'. hand_off pops past them
// and empties the queue, which deletes it; its next pop used to be refused
// (the node no longer has the queue), failing the release after the lock
// was already on its way to being freed. Now an emptied queue reads as
// empty: the Unlock succeeds and the lock is free.
func TestMigratingSlotReleaseEmptiesQueue(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	m := newMigrationEnv(cl, "{mig:e}lock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := migrationOpts(WithShardedPubSub(ShardedAuto))
	x := m.client(t, opts)
	a := m.client(t, opts)
	leaveForced(t, ctx, x, a, m.name)
	am := a.Mutex(m.name)
	if err := am.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"not a waiter's", "nor this"} {
		if _, err := m.from.Do(ctx, "RPUSH", m.ks.Queue, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.from.Do(ctx, "PEXPIRE", m.ks.Queue, 60000); err != nil {
		t.Fatal(err)
	}
	m.migrate(t, ctx)
	if err := am.Unlock(ctx); err != nil {
		t.Fatalf("Unlock mid-migration: %v", err)
	}
	m.settle(t)
	if l, err := am.IsLocked(ctx); l || err != nil {
		t.Fatalf("IsLocked after the Unlock = %v, %v", l, err)
	}
	if q := m.queue(t, ctx); len(q) != 0 {
		t.Fatalf("queue after the Unlock: %q, want none", q)
	}
}

// TestMigratingSlotForceUnlock: ForceUnlock mid-migration. The evicted
// holder's grant box is refused on the source: it may have moved to the
// target, where a waiter could still pop a grant the force takes away. The
// force used to fail there after it had added the holder to the forced set
// and told it so, leaving it holding. Now it writes nothing and asks to be
// sent again (TRYAGAIN), as Redis does for keys a migration split: while
// the slot migrates the holder keeps its hold and is not in the forced
// set; once the slot settles the same ForceUnlock call completes and hands
// the lock to the waiter queued behind the holder (the queue, which the
// force declares, must exist for its script to run on the source at all).
func TestMigratingSlotForceUnlock(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	m := newMigrationEnv(cl, "{mig:f}lock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := migrationOpts(WithShardedPubSub(ShardedAuto))
	x, h, f, w := m.client(t, opts), m.client(t, opts), m.client(t, opts), m.client(t, opts)
	leaveForced(t, ctx, x, f, m.name)
	hm, wm := h.Mutex(m.name), w.Mutex(m.name)
	if err := hm.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	field := holderField(hm)
	// A waiter, whose queue the force declares, and to whom it hands the
	// lock once it completes.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	gotW := lockAsync(wctx, wm)
	waitFor(t, "the waiter to queue", func() bool {
		i, err := f.Inspect(ctx, m.name)
		return err == nil && len(i.Waiters) == 1
	})
	m.migrate(t, ctx)
	type forced struct {
		ok  bool
		err error
	}
	got := make(chan forced, 1)
	go func() {
		ok, err := f.Mutex(m.name).ForceUnlock(ctx)
		got <- forced{ok, err}
	}()
	// The force is sent again and again while the slot migrates; each
	// time it must leave the lock as it was.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		select {
		case r := <-got:
			t.Fatalf("ForceUnlock returned mid-migration: %v, %v", r.ok, r.err)
		case <-time.After(50 * time.Millisecond):
		}
		if hh := m.hash(t, ctx); len(hh) != 1 || hh[field] != "1" {
			t.Fatalf("mid-migration the lock's hash is %v, want the holder's field %q alone", hh, field)
		}
		v, err := m.from.Do(ctx, "SISMEMBER", m.ks.Forced, field)
		if err != nil || v != int64(0) {
			t.Fatalf("mid-migration the holder is in the forced set (%v, %v)", v, err)
		}
		if err := hm.Err(); err != nil {
			t.Fatalf("the holder was told of a loss mid-migration: %v", err)
		}
	}
	m.settle(t)
	select {
	case r := <-got:
		if !r.ok || r.err != nil {
			t.Fatalf("ForceUnlock after the slot settled = %v, %v", r.ok, r.err)
		}
	case <-ctx.Done():
		t.Fatal("ForceUnlock did not complete once the slot settled")
	}
	if v, err := m.from.Do(ctx, "SISMEMBER", m.ks.Forced, field); err != nil || v != int64(1) {
		t.Fatalf("after the force the holder is not in the forced set (%v, %v)", v, err)
	}
	awaitNil(t, gotW, 30*time.Second, "the waiter was not given the lock the force freed")
	if hh := m.hash(t, ctx); len(hh) != 1 || hh[holderField(wm)] != "1" {
		t.Fatalf("after the force the lock's hash is %v, want the waiter's field %q alone", hh, holderField(wm))
	}
	// The holder learns at its next renewal (sharded pub/sub); its Unlock
	// asks Redis, which says why.
	if err := hm.Unlock(ctx); !errors.Is(err, ErrForced) {
		t.Fatalf("the forced holder's Unlock: %v, want ErrForced", err)
	}
	if err := wm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
