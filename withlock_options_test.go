package dlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestWithLockKinds(t *testing.T) {
	c, other := newClient(t, shared), newClient(t, shared)
	ctx := ctxT(t)

	// Read: two readers inside at once, a writer excluded meanwhile.
	var wg sync.WaitGroup
	inside := make(chan struct{}, 2)
	release := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.WithLock(ctx, "wl:rw", func(context.Context) error {
				inside <- struct{}{}
				<-release
				return nil
			}, Read())
			if err != nil {
				t.Error(err)
			}
		}()
	}
	<-inside
	<-inside // both readers at once
	err := other.WithLock(ctx, "wl:rw", func(context.Context) error { return nil }, Write(), WaitTime(50*time.Millisecond))
	if !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("Write beside readers = %v, want ErrWaitTimeout", err)
	}
	close(release)
	wg.Wait()
	ran := false
	if err := other.WithLock(ctx, "wl:rw", func(ctx context.Context) error {
		ran = true
		if ok, _ := c.RWMutex("wl:rw").TryRLock(ctx, 0, 0); ok {
			t.Error("a reader got in beside WithLock(Write())")
		}
		return nil
	}, Write()); err != nil || !ran {
		t.Fatalf("Write after the readers = %v (ran %v)", err, ran)
	}

	// Fair: a fair lock, held inside fn.
	if err := c.WithLock(ctx, "wl:fair", func(ctx context.Context) error {
		if ok, _ := other.FairMutex("wl:fair").TryLock(ctx, 0, 0); ok {
			t.Error("fair lock not held inside WithLock(Fair())")
		}
		return nil
	}, Fair()); err != nil {
		t.Fatal(err)
	}

	for i, opts := range [][]LockOption{{Fair(), Read()}, {Read(), Write()}, {Write(), Fair()}} {
		if err := c.WithLock(ctx, "wl:bad", func(context.Context) error { return nil }, opts...); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("conflicting options %d: %v", i, err)
		}
	}
	if err := c.WithLock(ctx, "wl:same", func(context.Context) error { return nil }, Read(), Read()); err != nil {
		t.Errorf("Read twice: %v", err)
	}
}

// kindRecorder is an Observer that records the kind of every acquisition.
type kindRecorder struct {
	NopObserver
	mu    sync.Mutex
	kinds []Kind
}

func (k *kindRecorder) AcquireStarted(_ context.Context, kind Kind, _ string) func(Acquisition) {
	k.mu.Lock()
	k.kinds = append(k.kinds, kind)
	k.mu.Unlock()
	return nil
}

// Each WithLock option takes its own kind of lock, not a plain Mutex.
func TestWithLockOptionsPickTheKind(t *testing.T) {
	rec := &kindRecorder{}
	c := newClient(t, shared, WithObserver(rec))
	ctx := ctxT(t)
	noop := func(context.Context) error { return nil }
	for _, o := range []LockOption{Fair(), Read(), Write(), WaitTime(time.Second)} {
		if err := c.WithLock(ctx, "wl:kind", noop, o); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []Kind{KindFair, KindRead, KindWrite, KindMutex}
	if len(rec.kinds) != len(want) {
		t.Fatalf("kinds %v, want %v", rec.kinds, want)
	}
	for i := range want {
		if rec.kinds[i] != want[i] {
			t.Fatalf("kinds %v, want %v", rec.kinds, want)
		}
	}
}

func TestWithLockContextCarriesTheGrant(t *testing.T) {
	c := newClient(t, shared)
	ctx := ctxT(t)
	if _, ok := GrantFrom(ctx); ok {
		t.Fatal("a plain context carries a grant")
	}
	err := c.WithLock(ctx, "grant-in-ctx", func(fctx context.Context) error {
		g, ok := GrantFrom(fctx)
		info, err := c.Inspect(fctx, "grant-in-ctx")
		if err != nil {
			return err
		}
		if !ok || g.Name != "grant-in-ctx" || g.Backend != BackendRedis || g.Token == 0 || g.Token != info.Token || TokenFrom(fctx) != g.Token {
			t.Errorf("GrantFrom = %+v, %v; TokenFrom = %d; Redis' last token %d", g, ok, TokenFrom(fctx), info.Token)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestResolveLockOptions(t *testing.T) {
	s, err := resolve("n", nil)
	if err != nil || s != (FallbackRequest{Name: "n", Wait: DefaultWaitTime, Kind: KindMutex}) {
		t.Fatalf("defaults = %+v, %v", s, err)
	}
	s, err = resolve("n", []LockOption{WaitTime(time.Second), LeaseTime(2 * time.Second), Read()})
	if err != nil || s != (FallbackRequest{Name: "n", Wait: time.Second, Lease: 2 * time.Second, Kind: KindRead}) {
		t.Fatalf("resolved = %+v, %v", s, err)
	}
	for _, bad := range [][]LockOption{{nil}, {WaitTime(-1)}, {Read(), Write()}} {
		if _, err := resolve("n", bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("resolve(%d bad options) = %v, want ErrInvalidArgument", len(bad), err)
		}
	}
}
