package dlock

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

// unreachable is a client whose every command fails with a dial error, so an
// ErrInvalidArgument from it proves no network call was made.
func unreachable(t testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestBadInputFailsBeforeTheNetwork(t *testing.T) {
	c, err := New(unreachable(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, name := range []string{"", strings.Repeat("n", 2000), "a}b", "\xff\xfe"} {
		m := c.Mutex(name)
		_, e1 := m.TryLock(ctx, time.Second, 0)
		e2 := m.Lock(ctx)
		e3 := m.Unlock(ctx)
		_, e4 := m.ForceUnlock(ctx)
		_, e5 := m.IsLocked(ctx)
		_, e6 := m.HoldCount(ctx)
		_, e7 := m.RemainingTTL(ctx)
		e8 := c.WithLock(ctx, name, func(context.Context) error { return nil })
		for i, err := range []error{e1, e2, e3, e4, e5, e6, e7, e8} {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("name %.20q, call %d: %v, want ErrInvalidArgument", name, i+1, err)
			}
		}
	}
	m := c.Mutex("fine")
	if _, err := m.TryLock(ctx, 0, 500*time.Microsecond); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("sub-millisecond lease: %v", err)
	}
	//lint:ignore SA1012 testing the nil check
	if err := m.Lock(nil); !errors.Is(err, ErrInvalidArgument) { //nolint:staticcheck
		t.Errorf("nil ctx: %v", err)
	}
	for i, opts := range [][]LockOption{{WaitTime(-time.Second)}, {LeaseTime(-time.Second)}, {LeaseTime(time.Microsecond)}, {nil}} {
		if err := c.WithLock(ctx, "fine", func(context.Context) error { return nil }, opts...); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("lock options %d: %v", i, err)
		}
	}
	if err := c.WithLock(ctx, "fine", nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil fn: %v", err)
	}
}

func TestBadOptions(t *testing.T) {
	rdb := unreachable(t)
	if _, err := New(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("New(nil) = %v", err)
	}
	// A Ring was accepted, and its Client's first Lock panicked in
	// go-redis (Ring.Subscribe of no channel).
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if c, err := New(ring); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("New(ring) = %v, want ErrInvalidArgument", err)
		if c != nil {
			_ = c.Close()
		}
	}
	for i, o := range []Option{nil, WithWatchdogTimeout(time.Millisecond), WithWatchdogTimeout(-1), WithLogger(nil),
		WithObserver(nil), WithClientID(""), WithClientID("a:b"), WithClientID("a b"), WithClientID("a\x7f"), WithClientID("a\u009b2J"),
		WithClientID("a\xff"), WithClientID("a\x1b]0;x\a"), WithHandoffClaim(0), WithCloseTimeout(0)} {
		if _, err := New(rdb, o); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("option %d: %v, want ErrInvalidArgument", i, err)
		}
	}
}

func TestClose(t *testing.T) {
	r := shared
	c, err := New(rdbFor(t, r))
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t, r)
	ctx := ctxT(t)
	held := c.Mutex("close:held")
	if err := held.Lock(lockCtx(t, held)); err != nil { // count 2: Close releases it all the same
		t.Fatal(err)
	}
	fixed := c.Mutex("close:fixed")
	if ok, err := fixed.TryLock(ctx, 0, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	blocker := other.Mutex("close:wait")
	mustLock(t, blocker)
	waiting := make(chan error, 1)
	go func() { waiting <- c.Mutex("close:wait").Lock(ctx) }()
	waitFor(t, "waiter queued", func() bool { n, _ := rdbFor(t, r).LLen(ctx, blocker.p.Keys().Queue).Result(); return n == 1 })

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-waiting; !errors.Is(err, ErrClosed) {
		t.Errorf("waiter after Close: %v, want ErrClosed", err)
	}
	for _, name := range []string{"close:held", "close:fixed"} {
		if n, _ := rdbFor(t, r).Exists(ctx, name).Result(); n != 0 {
			t.Errorf("%s still held after Close", name)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := held.Unlock(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Unlock after Close: %v", err)
	}
	if _, err := c.Mutex("x").TryLock(ctx, 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("TryLock after Close: %v", err)
	}
	if err := c.WithLock(ctx, "x", func(context.Context) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("WithLock after Close: %v", err)
	}
	mustUnlock(t, blocker)
}

func FuzzInput(f *testing.F) {
	f.Add("coupon", int64(0), int64(0), int64(30000), "id")
	f.Add("", int64(-1), int64(1), int64(1), "")
	f.Add("a{b}c", int64(1e9), int64(-5), int64(29), "x:y")
	f.Add("}", int64(5), int64(999999), int64(1<<40), "\x00")
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer rdb.Close()
	f.Fuzz(func(t *testing.T, name string, wait, lease, watchdog int64, id string) {
		c, err := New(rdb, WithWatchdogTimeout(time.Duration(watchdog)*time.Microsecond), WithClientID(id))
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("New: %v", err)
			}
			return
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		m := c.Mutex(name)
		ok, err := m.TryLock(ctx, time.Duration(wait)%time.Millisecond, time.Duration(lease))
		if ok {
			t.Fatal("acquired from an unreachable server")
		}
		if err == nil {
			t.Fatal("no error from an unreachable server")
		}
		if name == "" && !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("empty name: %v", err)
		}
		if err := m.Unlock(ctx); err == nil {
			t.Fatal("Unlock of nothing succeeded")
		}
	})
}

// FuzzRWInput feeds names and durations to the read-write lock and to
// MultiLock: against an unreachable server every call fails, bad input with
// ErrInvalidArgument, and nothing panics.
func FuzzRWInput(f *testing.F) {
	f.Add("rw", int64(0), int64(0), "other")
	f.Add("", int64(-1), int64(1), "")
	f.Add("a{b}c", int64(1e9), int64(-5), "a{b}c")
	f.Add("}", int64(5), int64(999999), "x y")
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer rdb.Close()
	c, err := New(rdb)
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	f.Fuzz(func(t *testing.T, name string, wait, lease int64, other string) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		w, l := time.Duration(wait)%time.Millisecond, time.Duration(lease)
		rw := c.RWMutex(name)
		bad := keysInvalid(name)
		check := func(what string, ok bool, err error) {
			t.Helper()
			if ok || err == nil {
				t.Fatalf("%s: %v, %v from an unreachable server", what, ok, err)
			}
			if bad && !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("%s on bad name %q: %v", what, name, err)
			}
		}
		ok, err := rw.TryRLock(ctx, w, l)
		check("TryRLock", ok, err)
		ok, err = rw.TryLock(ctx, w, l)
		check("TryLock", ok, err)
		check("RUnlock", false, rw.RUnlock(ctx))
		check("Unlock", false, rw.Unlock(ctx))
		ml := c.MultiLock(c.Mutex(other), rw.RLocker(), c.FairMutex(name+"x"))
		ok, err = ml.TryLock(ctx, w, l)
		if ok || err == nil {
			t.Fatalf("MultiLock: %v, %v from an unreachable server", ok, err)
		}
		if (bad || keysInvalid(other) || other == name || other == name+"x") && !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("MultiLock with names %q, %q: %v", name, other, err)
		}
	})
}

func keysInvalid(name string) bool { return keys.Validate(name) != nil }

func TestDefaultClientIDNamesHostAndProcess(t *testing.T) {
	c, err := New(rdbFor(t, shared))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	host, pid, ok := ParseClientID(c.ID())
	wantHost, _ := os.Hostname()
	if !ok || pid != os.Getpid() || (wantHost != "" && host != wantHost) {
		t.Fatalf("ParseClientID(%q) = %q, %d, %v; want %q, %d", c.ID(), host, pid, ok, wantHost, os.Getpid())
	}
	m := c.Mutex("client-id-owner")
	mustLock(t, m)
	if h, p, ok := ParseClientID(m.Owner()); !ok || h != host || p != pid {
		t.Fatalf("ParseClientID(owner %q) = %q, %d, %v", m.Owner(), h, p, ok)
	}
	mustUnlock(t, m)
	d, _ := New(rdbFor(t, shared))
	defer d.Close()
	if d.ID() == c.ID() {
		t.Fatal("two clients of one process got the same id")
	}
	for _, id := range []string{"2f1c9a52-4b7e-4a53-9d1e-0c4b8a7f3e21", "a/b/c", "h/0/0123456789abcdef", "h/x/0123456789abcdef", "/1/0123456789abcdef"} {
		if _, _, ok := ParseClientID(id); ok {
			t.Errorf("ParseClientID(%q) accepted a foreign id", id)
		}
	}
}

// neverFallback is a fallback tier that no test here reaches.
type neverFallback struct{}

func (neverFallback) Backend() string { return "never" }
func (neverFallback) Run(context.Context, FallbackRequest, func(context.Context) error) error {
	return errors.New("the fallback tier was reached")
}

// A nil ctx is an invalid argument for WithLock with a fallback tier too:
// it reached the tier, which read the nil ctx and panicked.
func TestWithLockNilContextWithFallback(t *testing.T) {
	c, err := New(unreachable(t), WithFallback(neverFallback{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	//lint:ignore SA1012 testing the nil check
	if err := c.WithLock(nil, "fine", func(context.Context) error { return nil }); !errors.Is(err, ErrInvalidArgument) { //nolint:staticcheck
		t.Errorf("WithLock with a nil ctx: %v, want ErrInvalidArgument", err)
	}
}

// A MultiLock with a member of a closed Client fails with ErrClosed before
// any member is taken: it took the members before it, then rolled them back.
func TestMultiLockClosedMemberBeforeAnyCall(t *testing.T) {
	ctx := ctxT(t)
	open := newClient(t, shared)
	closed, err := New(rdbFor(t, shared))
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	before := commands(t, shared)["evalsha"]
	ml := open.MultiLock(open.Mutex("multi:closed:a"), closed.Mutex("multi:closed:b"))
	if err := ml.Lock(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("MultiLock with a closed member: %v, want ErrClosed", err)
	}
	if n := commands(t, shared)["evalsha"] - before; n != 0 {
		t.Errorf("%d scripts ran before the closed member was found, want none", n)
	}
}

// What Acquire and New return with their error is safe to use as a
// deferred Release or Close would: a nil Permit holds nothing and a nil
// Client has nothing to close; neither panics.
func TestNilPermitAndClientHoldNothing(t *testing.T) {
	ctx := context.Background()
	var p *Permit
	if err := p.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("nil Permit's Release: %v, want ErrNotHeld", err)
	}
	if err := p.Extend(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("nil Permit's Extend: %v, want ErrNotHeld", err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("nil Permit's Done is not closed")
	}
	if err := p.Err(); !errors.Is(err, ErrNotHeld) || p.ID() != "" || p.N() != 0 {
		t.Errorf("nil Permit: Err %v, ID %q, N %d; want ErrNotHeld, \"\", 0", err, p.ID(), p.N())
	}
	var c *Client
	if err := c.Close(); err != nil {
		t.Errorf("nil Client's Close: %v", err)
	}
}
