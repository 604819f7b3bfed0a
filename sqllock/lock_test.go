package sqllock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/sqllock"
)

// TestBadInput: every bad argument is refused with a typed error before
// any network call (the pool points at a port nothing listens on, so a
// network call would fail differently), and a closed Locker refuses with
// ErrClosed the same way.
func TestBadInput(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		dsn := map[string]string{
			"mysql":    "root@tcp(127.0.0.1:1)/dlock?timeout=1s",
			"postgres": "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=1",
		}[b.name]
		db := b.openDSN(t, dsn)
		ctx := ctxT(t, 10*time.Second)

		if _, err := b.locker(nil); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("nil db: %v", err)
		}
		for i, opt := range []sqllock.Option{
			nil, sqllock.MaxSessions(0), sqllock.CheckInterval(0), sqllock.OpTimeout(time.Millisecond),
			sqllock.FenceTable(""), sqllock.FenceTable("t; DROP TABLE x"), sqllock.FenceTable("a.b.c"),
		} {
			if _, err := b.locker(db, opt); !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("option %d: %v", i, err)
			}
		}
		small := b.openDSN(t, dsn)
		small.SetMaxOpenConns(4)
		if _, err := b.locker(small, sqllock.MaxSessions(4)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("MaxSessions = pool size: %v", err)
		}
		if l, err := b.locker(small); err != nil || l.MaxSessions() != 2 {
			t.Errorf("default MaxSessions on a pool of 4 = %v, %v; want 2", l, err)
		}

		l := b.newLocker(t, db, sqllock.FenceTable("dlock.custom_fence"))
		if l.Backend() != b.name || l.MaxSessions() != sqllock.DefaultMaxSessions {
			t.Fatalf("Backend %q MaxSessions %d", l.Backend(), l.MaxSessions())
		}
		ran := false
		fn := func(context.Context) error { ran = true; return nil }
		invalid := map[string]error{
			"empty name": l.WithLock(ctx, "", fn),
			"nil fn":     l.WithLock(ctx, "n", nil),
			"nil option": l.WithLock(ctx, "n", fn, nil),
			"bad wait":   l.WithLock(ctx, "n", fn, dlock.WaitTime(-1)),
			"two kinds":  l.WithLock(ctx, "n", fn, dlock.Read(), dlock.Write()),
		}
		_, err := l.Acquire(ctx, "n", dlock.FallbackRequest{Kind: dlock.KindMulti}, 0)
		invalid["multi kind"] = err
		_, err = l.Acquire(ctx, "n", dlock.FallbackRequest{Lease: -1}, 0)
		invalid["negative lease"] = err
		_, err = l.Acquire(ctx, "n", dlock.FallbackRequest{}, 1<<63)
		invalid["floor"] = err
		for what, err := range invalid {
			if !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("%s: %v", what, err)
			}
		}
		if ran {
			t.Fatal("fn ran")
		}
		// The unreachable database really is unreachable.
		if err := l.WithLock(ctx, "n", fn); err == nil || errors.Is(err, dlock.ErrInvalidArgument) {
			t.Fatalf("lock on an unreachable database: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		start := time.Now()
		closed := []error{l.WithLock(ctx, "n", fn), l.Setup(ctx)}
		_, err = l.Acquire(ctx, "n", dlock.FallbackRequest{}, 0)
		closed = append(closed, err)
		for i, err := range closed {
			if !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("call %d after Close: %v", i, err)
			}
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("calls on a closed Locker took %v: they went to the network", d)
		}
	})
}

// TestWithLock: fn runs holding the lock, its context carries the grant,
// its error comes back untouched, the lock is free and the session back in
// the pool afterwards, also when fn panics.
func TestWithLock(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db, admin := b.open(t), b.open(t)
		l := b.newLocker(t, db)
		ctx := ctxT(t, 30*time.Second)
		name := "withlock:" + b.name
		if err := l.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		before := b.now(t, admin)
		sentinel := errors.New("business error")
		var g dlock.Grant
		err := l.WithLock(ctx, name, func(fctx context.Context) error {
			var ok bool
			g, ok = dlock.GrantFrom(fctx)
			if !ok {
				t.Error("fn's context carries no grant")
			}
			if b.holder(t, admin, name) == 0 {
				t.Error("the lock is not held on the server inside fn")
			}
			if n := db.Stats().InUse; n != 1 {
				t.Errorf("%d sessions pinned inside fn, want 1", n)
			}
			return sentinel
		})
		if err != sentinel {
			t.Fatalf("WithLock returned %v, want fn's error itself", err)
		}
		if g.Name != name || g.Backend != b.name || g.Token < uint64(before) {
			t.Fatalf("grant %+v: want name %q, backend %q, token >= server clock %d", g, name, b.name, before)
		}
		if b.holder(t, admin, name) != 0 {
			t.Fatal("lock still held after WithLock")
		}
		if n := db.Stats().InUse; n != 0 {
			t.Fatalf("%d sessions in use after WithLock", n)
		}

		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v", r)
				}
			}()
			_ = l.WithLock(ctx, name, func(context.Context) error { panic("boom") })
		}()
		if b.holder(t, admin, name) != 0 || db.Stats().InUse != 0 {
			t.Fatal("a panicking fn left the lock held or its session pinned")
		}

		// fn cancels the caller's ctx: the release still happens.
		cctx, cancel := context.WithCancel(ctx)
		err = l.WithLock(cctx, name, func(context.Context) error { cancel(); return nil })
		if err != nil {
			t.Fatalf("WithLock whose ctx fn cancelled: %v", err)
		}
		if b.holder(t, admin, name) != 0 || db.Stats().InUse != 0 {
			t.Fatal("a cancelled ctx left the lock held or its session pinned")
		}
	})
}

// TestSessionPinning: the *sql.DB session trap. Locks and releases run on
// the hold's own session while the application keeps using (and rotating)
// the same pool; every release succeeds on the session that locked, each
// hold has its own session, and nothing stays locked.
func TestSessionPinning(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db, admin := b.open(t), b.open(t)
		db.SetMaxIdleConns(2)
		l := b.newLocker(t, db)
		ctx := ctxT(t, 60*time.Second)
		names := []string{"pin:a", "pin:b", "pin:c"}
		for round := 0; round < 5; round++ {
			holds := make([]*sqllock.Hold, len(names))
			for i, n := range names {
				h, err := l.Acquire(ctx, n, dlock.FallbackRequest{}, 0)
				if err != nil {
					t.Fatal(err)
				}
				holds[i] = h
				// The application's own queries go through the same pool,
				// so an unpinned release would likely use another session.
				for j := 0; j < 3; j++ {
					if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
						t.Fatal(err)
					}
				}
			}
			seen := map[int64]bool{}
			for _, n := range names {
				id := b.holder(t, admin, n)
				if id == 0 || seen[id] {
					t.Fatalf("round %d: %q held by session %d (seen %v)", round, n, id, seen)
				}
				seen[id] = true
			}
			// Release in another order than taken.
			for _, i := range []int{1, 2, 0} {
				if err := holds[i].Release(ctx); err != nil {
					t.Fatalf("round %d: release %q: %v", round, names[i], err)
				}
				if b.holder(t, admin, names[i]) != 0 {
					t.Fatalf("round %d: %q still locked after Release", round, names[i])
				}
			}
		}
		if n := db.Stats().InUse; n != 0 {
			t.Fatalf("%d sessions in use", n)
		}
	})
}

// TestNameMapping: names differing only by case stay distinct locks, a
// 10,000-byte name works, names sharing a long prefix stay distinct, and
// the MySQL name is 64 lower-case characters.
func TestNameMapping(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db, admin := b.open(t), b.open(t)
		l := b.newLocker(t, db)
		ctx := ctxT(t, 30*time.Second)
		long := strings.Repeat("x", 10_000)
		names := []string{"Coupon:42", "coupon:42", "COUPON:42", long, long + "a", long + "b", "ключ", "\x00"}
		var holds []*sqllock.Hold
		for _, n := range names {
			// Wait 0: a clash with an earlier name would fail at once.
			h, err := l.Acquire(ctx, n, dlock.FallbackRequest{}, 0)
			if err != nil {
				t.Fatalf("name of %d bytes %.20q: %v", len(n), n, err)
			}
			holds = append(holds, h)
			if b.holder(t, admin, n) == 0 {
				t.Fatalf("%.20q not visible on the server", n)
			}
		}
		for _, h := range holds {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range names {
			mn := sqllock.MySQLLockName(n)
			if len(mn) != 64 || mn != strings.ToLower(mn) || !strings.HasPrefix(mn, "dlock:") {
				t.Fatalf("MySQL name %q", mn)
			}
		}
	})
}

// TestSeveralLocksAtOnce: one call chain holds several names at once (the
// seeds' ordered locks). On MySQL one session holding several GET_LOCKs
// can hit ER_USER_LOCK_DEADLOCK (MariaDB: ER_LOCK_DEADLOCK); here each hold
// has its own session, so nested holds just work.
func TestSeveralLocksAtOnce(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db, admin := b.open(t), b.open(t)
		l := b.newLocker(t, db)
		ctx := ctxT(t, 30*time.Second)
		names := []string{"multi:1", "multi:2", "multi:3", "multi:4", "multi:5"}
		var nest func(ctx context.Context, i int) error
		nest = func(ctx context.Context, i int) error {
			if i == len(names) {
				ids := map[int64]bool{}
				for _, n := range names {
					ids[b.holder(t, admin, n)] = true
				}
				if len(ids) != len(names) || ids[0] {
					t.Errorf("holding sessions %v, want %d distinct", ids, len(names))
				}
				if n := db.Stats().InUse; n != len(names) {
					t.Errorf("%d sessions pinned, want %d", n, len(names))
				}
				return nil
			}
			return l.WithLock(ctx, names[i], func(ctx context.Context) error { return nest(ctx, i+1) }, dlock.WaitTime(time.Second))
		}
		if err := nest(ctx, 0); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if b.holder(t, admin, n) != 0 {
				t.Fatalf("%q still held", n)
			}
		}
	})
}

// TestReentryAndKinds: a nested WithLock of the same name in the same call
// chain re-enters (same grant, no new session); a read hold refuses a
// nested write (dlock.ErrUpgrade); read locks are shared on PostgreSQL and
// exclusive on MySQL.
func TestReentryAndKinds(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db := b.open(t)
		l := b.newLocker(t, db)
		ctx := ctxT(t, 30*time.Second)
		name := "reenter:" + b.name
		err := l.WithLock(ctx, name, func(outer context.Context) error {
			return l.WithLock(outer, name, func(inner context.Context) error {
				if dlock.TokenFrom(inner) != dlock.TokenFrom(outer) || db.Stats().InUse != 1 {
					t.Errorf("re-entry took a new grant: tokens %d/%d, %d sessions", dlock.TokenFrom(outer), dlock.TokenFrom(inner), db.Stats().InUse)
				}
				return nil
			}, dlock.WaitTime(0))
		})
		if err != nil {
			t.Fatal(err)
		}
		err = l.WithLock(ctx, name, func(rctx context.Context) error {
			return l.WithLock(rctx, name, func(context.Context) error { return nil }, dlock.Write())
		}, dlock.Read())
		if !errors.Is(err, dlock.ErrUpgrade) {
			t.Fatalf("write inside read: %v", err)
		}

		r1, err := l.Acquire(ctx, name, dlock.FallbackRequest{Kind: dlock.KindRead}, 0)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := l.Acquire(ctx, name, dlock.FallbackRequest{Kind: dlock.KindRead}, 0)
		if b.name == "postgres" {
			if err != nil {
				t.Fatalf("second reader: %v", err)
			}
			if _, werr := l.Acquire(ctx, name, dlock.FallbackRequest{Kind: dlock.KindWrite}, 0); !errors.Is(werr, dlock.ErrWaitTimeout) {
				t.Fatalf("writer beside readers: %v", werr)
			}
			if err := r2.Release(ctx); err != nil {
				t.Fatal(err)
			}
		} else if !errors.Is(err, dlock.ErrWaitTimeout) {
			t.Fatalf("MySQL read locks are exclusive; second reader: %v", err)
		}
		// Mutex, Fair and Write all exclude a reader and each other.
		for _, k := range []dlock.Kind{dlock.KindMutex, dlock.KindFair, dlock.KindWrite} {
			if _, err := l.Acquire(ctx, name, dlock.FallbackRequest{Kind: k}, 0); !errors.Is(err, dlock.ErrWaitTimeout) {
				t.Fatalf("%s beside a reader: %v", k, err)
			}
		}
		if err := r1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := l.Acquire(ctx, name, dlock.FallbackRequest{Kind: dlock.KindFair}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []dlock.Kind{dlock.KindMutex, dlock.KindWrite, dlock.KindRead} {
			if _, err := l.Acquire(ctx, name, dlock.FallbackRequest{Kind: k}, 0); !errors.Is(err, dlock.ErrWaitTimeout) {
				t.Fatalf("%s beside a fair holder: %v", k, err)
			}
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r1.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("second Release: %v", err)
		}
	})
}

// TestWaitTimeout: a held lock makes another Locker (another process) wait
// for the wait time and get dlock.ErrWaitTimeout without running fn, with
// its session back in the pool; wait 0 makes one attempt.
func TestWaitTimeout(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db1, db2 := b.open(t), b.open(t)
		l1, l2 := b.newLocker(t, db1), b.newLocker(t, db2)
		ctx := ctxT(t, 30*time.Second)
		name := "timeout:" + b.name
		h, err := l1.Acquire(ctx, name, dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
			start := time.Now()
			err := l2.WithLock(ctx, name, func(context.Context) error {
				t.Error("fn ran without the lock")
				return nil
			}, dlock.WaitTime(wait))
			if !errors.Is(err, dlock.ErrWaitTimeout) {
				t.Fatalf("wait %v: %v", wait, err)
			}
			if d := time.Since(start); d < wait {
				t.Fatalf("wait %v gave up after %v", wait, d)
			}
			if n := db2.Stats().InUse; n != 0 {
				t.Fatalf("%d sessions pinned after a wait timeout", n)
			}
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l2.WithLock(ctx, name, func(context.Context) error { return nil }, dlock.WaitTime(0)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWaitIsHandedOver: a waiter blocked in the database's own queue (no
// polling) gets the lock once the holder releases, inside its wait, with a
// greater token.
func TestWaitIsHandedOver(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db1, db2 := b.open(t), b.open(t)
		l1, l2 := b.newLocker(t, db1), b.newLocker(t, db2)
		ctx := ctxT(t, 60*time.Second)
		name := "handover:" + b.name
		h, err := l1.Acquire(ctx, name, dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		var tok uint64
		done := make(chan error, 1)
		go func() {
			done <- l2.WithLock(ctx, name, func(ctx context.Context) error {
				tok = dlock.TokenFrom(ctx)
				return nil
			}, dlock.WaitTime(30*time.Second))
		}()
		eventually(t, 10*time.Second, "waiter pinned a session", func() bool { return db2.Stats().InUse == 1 })
		time.Sleep(100 * time.Millisecond) // let it queue on the server
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if tok <= h.Token() {
			t.Fatalf("waiter's token %d not above the holder's %d", tok, h.Token())
		}
	})
}
