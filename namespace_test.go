package dlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// A bad namespace is refused by New, before any network call: among them
// those that would run as Lua in the scripts' channel literals, or escape
// them, and those that nest ("a:b" with lock "x" is "a" with lock "b:x").
func TestNamespaceRefused(t *testing.T) {
	for _, ns := range []string{"", strings.Repeat("n", 65), "a{b", "a}b", "a*", "a?", "a[", "a]", "a b", "a\tb", "a\x01",
		"x'..redis.call('set','pwned','1').ok..'", `y\`, "a:b", `a"b`, "ключ"} {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		if _, err := New(rdb, WithNamespace(ns)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("WithNamespace(%q) = %v, want ErrInvalidArgument", ns, err)
		}
		_ = rdb.Close()
	}
}

// Every primitive works for a user whose ACL allows only the namespace's
// keys and channels and no @dangerous command; a release wakes its waiters
// by event; every key and channel begins with the namespace; names are
// reported without it; and the server's ACL LOG stays empty.
func TestNamespaceUnderACL(t *testing.T) {
	// The first-contact report runs too: its probes must stay within the
	// namespace and the ACL as well.
	reportAtFirstContact = true
	defer func() { reportAtFirstContact = false }()
	r := testenvRedis(t)
	admin := rdbFor(t, r)
	ctx := ctxT(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "svc", "on", ">pw", "resetkeys", "~ns:*", "resetchannels", "&ns:*", "+@all", "-@dangerous").Err(); err != nil {
		t.Fatal(err)
	}
	admin.Do(ctx, "ACL", "LOG", "RESET")
	svc := func() *Client {
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), Username: "svc", Password: "pw",
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
		t.Cleanup(func() { _ = rdb.Close() })
		// A re-check a minute away: only an event can wake a waiter in time.
		return newClientOn(t, rdb, WithNamespace("ns"), withRecheck(time.Minute))
	}
	a, b := svc(), svc()

	t.Run("Mutex", func(t *testing.T) {
		m := a.Mutex("orders")
		mustLock(t, m)
		bm := b.Mutex("orders")
		got := lockAsync(ctx, bm)
		waitFor(t, "the waiter queued", func() bool { return admin.LLen(ctx, "ns:dlock:queue:{ns:orders}").Val() == 1 })
		start := time.Now()
		mustUnlock(t, m)
		if d := await(t, got, 5*time.Second, "waiter"); d > time.Second {
			t.Fatalf("hand-off took %v: not by event", d)
		}
		t.Logf("hand-off under the namespace: %v", time.Since(start))
		if n := admin.Exists(ctx, "ns:orders").Val(); n != 1 {
			t.Fatal("the lock is not the hash at ns:orders")
		}
		if err := bm.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("EveryKind", func(t *testing.T) {
		f := a.FairMutex("fair")
		mustLock(t, &f.Mutex)
		mustUnlock(t, &f.Mutex)
		rw := a.RWMutex("rw")
		if err := rw.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		brw := b.RWMutex("rw")
		got := make(chan error, 1)
		go func() { got <- brw.Lock(ctx) }()
		time.Sleep(50 * time.Millisecond)
		if err := rw.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
		if d := await(t, got, 5*time.Second, "writer"); d > time.Second {
			t.Fatalf("the writer waited %v after the last reader: not by event", d)
		}
		if err := brw.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		s := a.Semaphore("sem", 3)
		p, err := s.AcquireN(ctx, 2, time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := s.Available(ctx); n != 1 || err != nil {
			t.Fatalf("Available = %d, %v", n, err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		e := a.Election("leader")
		lctx, err := e.Campaign(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Proclaim(lctx, "y"); err != nil {
			t.Fatal(err)
		}
		if v, err := b.Election("leader").Leader(ctx); v != "y" || err != nil {
			t.Fatalf("Leader = %q, %v", v, err)
		}
		if err := e.Resign(lctx); err != nil {
			t.Fatal(err)
		}
		l := a.CountDownLatch("latch")
		if ok, err := l.TrySetCount(ctx, 1, time.Minute); !ok || err != nil {
			t.Fatal(ok, err)
		}
		waited := make(chan error, 1)
		go func() { waited <- b.CountDownLatch("latch").Wait(ctx) }()
		time.Sleep(50 * time.Millisecond)
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		if d := await(t, waited, 5*time.Second, "latch waiter"); d > time.Second {
			t.Fatalf("the latch waiter waited %v: not by event", d)
		}
		err = a.WithLock(ctx, "job", func(fctx context.Context) error {
			if TokenFrom(fctx) == 0 {
				t.Error("no fencing token")
			}
			return nil
		}, LeaseTime(time.Second))
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Operator", func(t *testing.T) {
		m := a.Mutex("held")
		mustLock(t, m)
		info, err := b.Inspect(ctx, "held")
		if err != nil || !info.Locked || info.Name != "held" || len(info.Holders) != 1 {
			t.Fatalf("Inspect = %+v, %v", info, err)
		}
		all, err := b.Locks(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, l := range all {
			names[l.Name] = true
		}
		if !names["held"] || names["ns:held"] {
			t.Fatalf("Locks = %v: want names without the namespace", names)
		}
		if ok, err := b.Mutex("held").ForceUnlock(ctx); !ok || err != nil {
			t.Fatal(ok, err)
		}
		<-m.Done()
		_ = m.Unlock(ctx)
	})

	// Close waits for the Clients' background work, the first-contact
	// report included. Everything they left is the namespace's, and nothing
	// was denied.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	iter := admin.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		if !strings.HasPrefix(iter.Val(), "ns:") {
			t.Errorf("key %q outside the namespace", iter.Val())
		}
	}
	if log, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
		t.Fatalf("ACL LOG = %v, %v; want nothing denied", log, err)
	}
}

// A Client without a namespace does not force a tenant's lock by its key:
// "a:x" is namespace a's lock "x" only by its hash, not by its fencing
// counter, queue, forced set or channels, so the holder would not be told
// and a later grant would take a token below the tenant's. ForceUnlock
// refuses while the tenant's fencing counter exists; a plain lock named
// like it is forced as any other.
func TestForceUnlockRefusesATenantsLock(t *testing.T) {
	ctx := ctxT(t)
	tenant := newClient(t, shared, WithNamespace("a"))
	operator := newClient(t, shared)
	hctx, err := tenant.Mutex("x").LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := operator.Mutex("a:x").ForceUnlock(ctx); held || !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("ForceUnlock of a tenant's lock without its namespace: %v, %v; want ErrInvalidArgument", held, err)
	}
	if hctx.Err() != nil {
		t.Fatalf("the tenant's hold ended: %v", context.Cause(hctx))
	}
	if held, err := tenant.Mutex("x").ForceUnlock(ctx); !held || err != nil {
		t.Errorf("ForceUnlock with the tenant's namespace: %v, %v", held, err)
	}
	if err := operator.Mutex("a:plain").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := newClient(t, shared).Mutex("a:plain").ForceUnlock(ctx); !held || err != nil {
		t.Errorf("ForceUnlock of a plain lock named a:plain: %v, %v", held, err)
	}
}
