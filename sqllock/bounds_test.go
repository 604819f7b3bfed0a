package sqllock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
	"github.com/dlock-dev/dlock/sqllock"
)

// serverAddr returns the address of the backend's shared server.
func (b backend) serverAddr() string {
	if b.name == "postgres" {
		return sharedPG.Addr()
	}
	return sharedMy.Addr()
}

// refusedAddr returns an address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// A strict fallback asks the witness table whether other Clients still
// reach Redis. When the fallback database accepts and never answers, that
// question must end within the Locker's OpTimeout like every other
// statement, not hang a WithLock whose ctx has no deadline.
func TestStrictWitnessOnASilentDatabaseKeepsToOpTimeout(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		p := testenv.NewFaultProxy(t, b.serverAddr())
		db := b.openDSN(t, strings.Replace(b.dsn(), b.serverAddr(), p.Addr(), 1))
		l := b.newLocker(t, db, sqllock.OpTimeout(300*time.Millisecond))
		t.Cleanup(func() { _ = p.Heal() }) // before the Locker's checks
		if err := l.SawRedis(ctxT(t, 10*time.Second), "another client"); err != nil {
			t.Fatal(err)
		}
		c := tiered(t, refusedAddr(t), l, []dlock.FallbackOption{dlock.FallbackQuarantine(100 * time.Millisecond), dlock.FallbackStrict()})
		p.Blackhole()
		done := make(chan error, 1)
		go func() {
			done <- c.WithLock(context.Background(), "silent-witness:"+b.name, func(context.Context) error { return nil })
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("granted by a database that does not answer")
			}
			t.Logf("WithLock: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("WithLock still running 5s after the database went silent (OpTimeout 300ms, quarantine 100ms)")
		}
		_ = p.Heal()
	})
}

// The witness's SawRedis, run in the background whenever Redis answers,
// keeps to OpTimeout too when given a context without a deadline.
func TestSawRedisOnASilentDatabaseKeepsToOpTimeout(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		p := testenv.NewFaultProxy(t, b.serverAddr())
		db := b.openDSN(t, strings.Replace(b.dsn(), b.serverAddr(), p.Addr(), 1))
		l := b.newLocker(t, db, sqllock.OpTimeout(300*time.Millisecond))
		t.Cleanup(func() { _ = p.Heal() })
		if err := l.SawRedis(ctxT(t, 10*time.Second), "me"); err != nil {
			t.Fatal(err)
		}
		p.Blackhole()
		done := make(chan error, 1)
		go func() { done <- l.SawRedis(context.Background(), "me") }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("SawRedis succeeded against a silent database")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("SawRedis still running 5s after the database went silent (OpTimeout 300ms)")
		}
		_ = p.Heal()
	})
}

// A context that outlived its WithLock (kept by a goroutine fn started)
// carries a hold that has been released. Locking the same name with it must
// not re-enter that released hold: fn would run holding nothing while
// another session holds the lock.
func TestReentryIntoAReleasedHoldIsRefused(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db := b.open(t)
		l := b.newLocker(t, db)
		ctx := ctxT(t, 30*time.Second)
		name := "released-reentry:" + b.name
		var kept context.Context
		if err := l.WithLock(ctx, name, func(fctx context.Context) error {
			kept = fctx
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		other, err := l.Acquire(ctx, name, dlock.FallbackRequest{Name: name}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = other.Release(ctx) }()
		ran := false
		err = l.WithLock(kept, name, func(context.Context) error {
			ran = true
			return nil
		})
		if ran {
			t.Fatalf("fn ran (WithLock = %v) while another session (token %d) holds %q: the re-entered hold had been released", err, other.Token(), name)
		}
		if !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("WithLock = %v; want ErrNotHeld", err)
		}
	})
}

// Setup creates the fence table. On a database that accepts and never
// answers, it must end within OpTimeout like every other statement, even
// with a ctx that has no deadline: both when a pooled session is at hand
// (the CREATE hangs) and when one has to be opened (the handshake hangs).
func TestSetupOnASilentDatabaseKeepsToOpTimeout(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		for _, pooled := range []bool{true, false} {
			t.Run(map[bool]string{true: "pooled", false: "new session"}[pooled], func(t *testing.T) {
				p := testenv.NewFaultProxy(t, b.serverAddr())
				db := b.openDSN(t, strings.Replace(b.dsn(), b.serverAddr(), p.Addr(), 1))
				l := b.newLocker(t, db, sqllock.OpTimeout(300*time.Millisecond))
				t.Cleanup(func() { _ = p.Heal() })
				if pooled {
					// Twice: pgx pings a session it has never reused
					// when it is taken from the pool, which would
					// make Setup open a new one.
					for range 2 {
						if err := db.PingContext(ctxT(t, 10*time.Second)); err != nil {
							t.Fatal(err)
						}
					}
				}
				p.Blackhole()
				done := make(chan error, 1)
				go func() { done <- l.Setup(context.Background()) }()
				select {
				case err := <-done:
					if err == nil {
						t.Fatal("Setup succeeded against a silent database")
					}
					t.Logf("Setup: %v", err)
				case <-time.After(5 * time.Second):
					t.Fatal("Setup still running 5s after the database went silent (OpTimeout 300ms)")
				}
				_ = p.Heal()
			})
		}
	})
}
