package sqllock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
	"github.com/dlock-dev/dlock/sqllock"
)

// TestKilledSession: an operator kills the session holding the lock (KILL
// on MySQL, pg_terminate_backend on PostgreSQL). The hold ends with the
// same signal as a lost Redis hold: Done closes, Err wraps ErrLockLost,
// WithLock's fn context is cancelled with that cause, Release reports the
// loss; the lock is free and the session slot and pool connection are
// given back.
func TestKilledSession(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db, admin := b.open(t), b.open(t)
		l := b.newLocker(t, db, sqllock.CheckInterval(50*time.Millisecond))
		ctx := ctxT(t, 30*time.Second)
		name := "killed:" + b.name

		h, err := l.Acquire(ctx, name, dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		b.kill(t, admin, b.holder(t, admin, name))
		select {
		case <-h.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed after the session was killed")
		}
		if !errors.Is(h.Err(), dlock.ErrLockLost) {
			t.Fatalf("Err = %v", h.Err())
		}
		if err := h.Release(ctx); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Release after loss = %v", err)
		}
		eventually(t, 5*time.Second, "pool connection given back", func() bool { return db.Stats().InUse == 0 })

		var cause error
		err = l.WithLock(ctx, name, func(fctx context.Context) error {
			b.kill(t, admin, b.holder(t, admin, name))
			<-fctx.Done()
			cause = context.Cause(fctx)
			return fctx.Err()
		})
		if !errors.Is(cause, dlock.ErrLockLost) {
			t.Fatalf("fn's context cause = %v", cause)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WithLock = %v, want fn's error", err)
		}
		b.waitFree(t, admin, name)
		if err := l.WithLock(ctx, name, func(context.Context) error { return nil }, dlock.WaitTime(0)); err != nil {
			t.Fatalf("lock after a killed holder: %v", err)
		}
	})
}

// TestSessionCap: a Locker pins at most MaxSessions sessions (holds and
// waits); the next call fails at once with ErrTooManySessions, and the
// pool still serves the application meanwhile.
func TestSessionCap(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db, other := b.open(t), b.open(t)
		db.SetMaxOpenConns(8)
		l := b.newLocker(t, db, sqllock.MaxSessions(3))
		blocker := b.newLocker(t, other)
		ctx := ctxT(t, 60*time.Second)

		h1, err := l.Acquire(ctx, "cap:1", dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := l.Acquire(ctx, "cap:2", dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The third session waits on a lock held elsewhere.
		hb, err := blocker.Acquire(ctx, "cap:3", dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		waiting := make(chan error, 1)
		go func() {
			h, err := l.Acquire(ctx, "cap:3", dlock.FallbackRequest{Wait: 30 * time.Second}, 0)
			if err == nil {
				err = h.Release(ctx)
			}
			waiting <- err
		}()
		eventually(t, 10*time.Second, "waiter pinned a session", func() bool { return db.Stats().InUse == 3 })

		_, err = l.Acquire(ctx, "cap:4", dlock.FallbackRequest{Wait: 10 * time.Second}, 0)
		if !errors.Is(err, sqllock.ErrTooManySessions) || errors.Is(err, dlock.ErrWaitTimeout) {
			t.Fatalf("fourth session: %v", err)
		}
		if err := l.WithLock(ctx, "cap:4", func(context.Context) error { return nil }); !errors.Is(err, sqllock.ErrTooManySessions) {
			t.Fatalf("WithLock past the cap: %v", err)
		}
		// The pool is not drained: the application runs 5 queries at once.
		var wg sync.WaitGroup
		for i := 0; i < 5; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var one int
				if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()

		if err := hb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-waiting; err != nil {
			t.Fatalf("waiter: %v", err)
		}
		for _, h := range []*sqllock.Hold{h1, h2} {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.WithLock(ctx, "cap:4", func(context.Context) error { return nil }); err != nil {
			t.Fatalf("after releases: %v", err)
		}
	})
}

// TestCancelWhileBlocked: a call blocked in GET_LOCK / pg_advisory_lock
// returns promptly when its ctx ends (cancel or deadline), with ctx's
// error; the abandoned server session is ended (the server's session count
// goes back down) and does not grab the lock later: once the holder
// releases, the lock is free for anyone.
func TestCancelWhileBlocked(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db1, db2, admin := b.open(t), b.open(t), b.open(t)
		l1, l2 := b.newLocker(t, db1), b.newLocker(t, db2)
		ctx := ctxT(t, 60*time.Second)
		name := "blocked:" + b.name
		h, err := l1.Acquire(ctx, name, dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n := b.waiters(t, admin); n != 0 {
			t.Fatalf("%d lock waiters before the test", n)
		}

		for _, how := range []string{"cancel", "deadline"} {
			cctx, cancel := context.WithCancel(ctx)
			if how == "deadline" {
				cctx, cancel = context.WithTimeout(ctx, 2*time.Second)
			}
			// Watch the server: cancel (in the "cancel" case) once the call
			// waits there; either way, record that it did wait there.
			waited := make(chan bool, 1)
			go func() {
				for cctx.Err() == nil {
					var n int
					if err := admin.QueryRowContext(cctx, b.waitersQuery).Scan(&n); err == nil && n > 0 {
						waited <- true
						if how == "cancel" {
							cancel()
						}
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				waited <- false
			}()
			start := time.Now()
			err := l2.WithLock(cctx, name, func(context.Context) error {
				t.Error("fn ran")
				return nil
			}, dlock.WaitTime(time.Minute))
			returned := time.Since(start)
			cancel()
			if !<-waited {
				t.Fatalf("%s: the call never waited on the server (%v)", how, err)
			}
			want := map[string]error{"cancel": context.Canceled, "deadline": context.DeadlineExceeded}[how]
			if !errors.Is(err, want) {
				t.Fatalf("%s: %v", how, err)
			}
			if returned > 10*time.Second {
				t.Fatalf("%s: returned %v after the start, far past its ctx", how, returned)
			}
			// The abandoned session no longer waits on the server.
			start = time.Now()
			eventually(t, 10*time.Second, "no lock waiter left", func() bool { return b.waiters(t, admin) == 0 })
			t.Logf("%s: the abandoned session stopped waiting %v after the call returned", how, time.Since(start))
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// No ghost waiter took it.
		b.waitFree(t, admin, name)
		if err := l2.WithLock(ctx, name, func(context.Context) error { return nil }, dlock.WaitTime(0)); err != nil {
			t.Fatalf("after the holder released: %v", err)
		}
	})
}

// TestPausedServer: whatever the database does (here: frozen by SIGSTOP
// with a lock held), a call returns promptly once its ctx ends, a holder
// learns that its hold can no longer be confirmed, and Close finishes.
func TestPausedServer(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		var pause, resume func() error
		var dsn string
		if b.name == "mysql" {
			s := testenv.StartMariaDB(t)
			pause, resume, dsn = s.Pause, s.Resume, s.DSN()
		} else {
			s := testenv.StartPostgres(t)
			pause, resume, dsn = s.Pause, s.Resume, s.DSN()
		}
		db := b.openDSN(t, dsn)
		l, err := b.locker(db, sqllock.CheckInterval(50*time.Millisecond), sqllock.OpTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t, 60*time.Second)
		h, err := l.Acquire(ctx, "paused", dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := l.Acquire(ctx, "paused:2", dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resume() }()

		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err = l.WithLock(cctx, "other", func(context.Context) error { return nil }, dlock.WaitTime(time.Minute))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WithLock on a paused server: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("returned after %v", d)
		}
		// Release returns at once when its ctx ends, whatever the server.
		rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		start = time.Now()
		rerr := h.Release(rctx)
		rcancel()
		if !errors.Is(rerr, context.DeadlineExceeded) && !errors.Is(rerr, dlock.ErrLockLost) {
			t.Fatalf("Release on a paused server: %v", rerr)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Release returned after %v", d)
		}
		select {
		case <-h.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("hold not ended within 10s on a paused server")
		}
		// The other hold, taken before the pause, learns its loss.
		select {
		case <-h2.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("holder not told within 10s that its session stopped answering")
		}
		if !errors.Is(h2.Err(), dlock.ErrLockLost) {
			t.Fatalf("Err = %v", h2.Err())
		}
		start = time.Now()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("Close took %v on a paused server", d)
		}
		if err := resume(); err != nil {
			t.Fatal(err)
		}
		if n := db.Stats().InUse; n != 0 {
			t.Fatalf("%d sessions in use after Close", n)
		}
	})
}

// TestClose: Close tells every holder first (fn's context cancelled with a
// cause wrapping ErrLockLost and ErrClosed), wakes waiters with ErrClosed,
// releases every lock and returns every session.
func TestClose(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db, other, admin := b.open(t), b.open(t), b.open(t)
		l, err := b.locker(db)
		if err != nil {
			t.Fatal(err)
		}
		blocker := b.newLocker(t, other)
		ctx := ctxT(t, 60*time.Second)
		hb, err := blocker.Acquire(ctx, "close:blocked", dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{"close:1", "close:2", "close:3"}
		causes := make(chan error, len(names))
		results := make(chan error, len(names)+1)
		// A lock held on the server is not yet a hold whose fn runs: Close
		// between the two answers the call ErrClosed without running fn.
		// So Close waits until every fn runs (started).
		started := make(chan struct{}, len(names))
		for _, n := range names {
			go func() {
				results <- l.WithLock(ctx, n, func(fctx context.Context) error {
					started <- struct{}{}
					<-fctx.Done()
					causes <- context.Cause(fctx)
					return nil
				})
			}()
		}
		go func() {
			results <- l.WithLock(ctx, "close:blocked", func(context.Context) error { return nil }, dlock.WaitTime(time.Minute))
		}()
		for range names {
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("the holds' functions never ran")
			}
		}
		eventually(t, 10*time.Second, "3 holds and a waiter", func() bool { return db.Stats().InUse == 4 })
		for _, n := range names {
			eventually(t, 5*time.Second, "held", func() bool { return b.holder(t, admin, n) != 0 })
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		for range names {
			c := <-causes
			if !errors.Is(c, dlock.ErrLockLost) || !errors.Is(c, dlock.ErrClosed) {
				t.Fatalf("holder's cause %v", c)
			}
		}
		var closed int
		for range len(names) + 1 {
			if err := <-results; errors.Is(err, dlock.ErrClosed) {
				closed++
			}
		}
		if closed != len(names)+1 {
			t.Fatalf("%d of %d calls report ErrClosed", closed, len(names)+1)
		}
		for _, n := range names {
			if b.holder(t, admin, n) != 0 {
				t.Fatalf("%q still held after Close", n)
			}
		}
		if n := db.Stats().InUse; n != 0 {
			t.Fatalf("%d sessions in use after Close", n)
		}
		if err := hb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		b.waitFree(t, admin, "close:blocked")
	})
}

// TestLease: with dlock.LeaseTime the hold ends as lost when the lease runs
// out, fn's context is cancelled with ErrLockLost, and the lock is free.
func TestLease(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db, admin := b.open(t), b.open(t)
		l := b.newLocker(t, db)
		ctx := ctxT(t, 30*time.Second)
		name := "lease:" + b.name
		var cause error
		start := time.Now()
		err := l.WithLock(ctx, name, func(fctx context.Context) error {
			<-fctx.Done()
			cause = context.Cause(fctx)
			if b.holder(t, admin, name) != 0 {
				// Released right after the loss signal; allow it a moment.
				b.waitFree(t, admin, name)
			}
			return nil
		}, dlock.LeaseTime(300*time.Millisecond))
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("lease ended after %v", d)
		}
		if !errors.Is(cause, dlock.ErrLockLost) || !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("cause %v, WithLock %v", cause, err)
		}
	})
}

// TestKillEndsAbandonedSession: what Acquire does to a session it abandons
// mid-wait (KILL CONNECTION / pg_terminate_backend by the id it read
// first) ends a session blocked in GET_LOCK / pg_advisory_lock even while
// its client stays connected. (MariaDB and PostgreSQL also notice a closed
// client socket after a while; MySQL 8 waits out GET_LOCK's timeout.) A
// PostgreSQL pid with another start time is left alone.
func TestKillEndsAbandonedSession(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db1, db2 := b.open(t), b.open(t)
		l1, l2 := b.newLocker(t, db1), b.newLocker(t, db2)
		ctx := ctxT(t, 60*time.Second)
		name := "abandon:" + b.name
		h, err := l1.Acquire(ctx, name, dlock.FallbackRequest{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = h.Release(ctx) }()

		c, err := db2.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var id, start int64
		if err := c.QueryRowContext(ctx, l2.SessionQuery()).Scan(&id, &start); err != nil {
			t.Fatal(err)
		}
		q, arg := "SELECT GET_LOCK(?, 60)", any(sqllock.MySQLLockName(name))
		if b.name == "postgres" {
			q, arg = "SELECT pg_advisory_lock($1)", any(sqllock.PGLockKey(name))
		}
		blocked := make(chan error, 1)
		go func() {
			_, err := c.ExecContext(ctx, q, arg)
			blocked <- err
		}()
		admin := b.open(t)
		eventually(t, 10*time.Second, "session waits", func() bool { return b.waiters(t, admin) == 1 })
		if b.name == "postgres" {
			if err := l2.KillSession(ctx, id, start+1); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-blocked:
				t.Fatalf("a kill with the wrong start time ended the session: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err := l2.KillSession(ctx, id, start); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-blocked:
			if err == nil {
				t.Fatal("the killed session got the lock")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the killed session still waits")
		}
		if got := b.holder(t, admin, name); got == id || got == 0 {
			t.Fatalf("holder %d after the kill (killed %d)", got, id)
		}
	})
}
