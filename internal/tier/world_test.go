package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// world is one lock name, X, as both tiers see it, with fakes for Redis and
// the fallback: it counts X's holders across the tiers, so that a test can
// tell when the tiers let two of them in at once. A Redis holder of another
// Client, or one whose Redis hold started before the test, enters by hand.
type world struct {
	holders atomic.Int32
	overlap atomic.Bool   // two holders were inside at once
	redisUp atomic.Bool   // the fake Redis grants (else it refuses)
	sql     chan struct{} // the fake fallback lock (capacity 1)
}

func (w *world) enter() {
	if w.holders.Add(1) > 1 {
		w.overlap.Store(true)
	}
}

func (w *world) leave() { w.holders.Add(-1) }

// fakeFallback is a fallback tier whose lock is w.sql.
type fakeFallback struct{ w *world }

func (f fakeFallback) Backend() string { return "fake" }

func (f fakeFallback) Run(ctx context.Context, req Request, fn func(context.Context) error) error {
	t := time.NewTimer(req.Wait)
	defer t.Stop()
	select {
	case f.w.sql <- struct{}{}:
	case <-t.C:
		return lease.ErrWaitTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-f.w.sql }()
	return fn(ctx)
}

// openBreaker refuses every call; closedBreaker lets every call through.
type openBreaker struct{}

func (openBreaker) Allow() (func(error), error) { return nil, errors.New("open") }

type closedBreaker struct{}

func (closedBreaker) Allow() (func(error), error) { return func(error) {}, nil }

// newWorld returns a world with Redis down and the tiers over it, with
// quarantine q and recovery window r (the watchdog timeout is q).
func newWorld(b Breaker, q, r time.Duration) (*world, *Tiers) {
	w := &world{sql: make(chan struct{}, 1)}
	t := New(Config{
		Fallback: fakeFallback{w}, Breaker: b, Quarantine: q, Recovery: r, ClientID: "c", Watchdog: q,
		Redis: func(ctx context.Context, req Request, fn func(context.Context) error) error {
			if !w.redisUp.Load() {
				return fmt.Errorf("%w: connection refused", lease.ErrUnavailable)
			}
			return fn(ctx)
		},
		Raise:  func(context.Context, string, uint64) error { return nil },
		Detach: func(f func(context.Context)) { go f(context.Background()) },
		Logger: slog.New(slog.DiscardHandler),
	})
	return w, t
}

// lockX runs WithLock on X with wait; its fn is inside X until release is
// closed (nil: it leaves at once), and closes entered (when not nil) on
// entering.
func lockX(w *world, t *Tiers, wait time.Duration, entered, release chan struct{}) error {
	return t.WithLock(context.Background(), Request{Name: "X", Wait: wait}, func(context.Context) error {
		w.enter()
		defer w.leave()
		if entered != nil {
			close(entered)
		}
		if release != nil {
			<-release
		}
		return nil
	})
}

// mustRefuse fails t unless err refused the fallback (ErrUnavailable) and
// no two holders of X were inside at once.
func mustRefuse(t *testing.T, w *world, err error) {
	t.Helper()
	if w.overlap.Load() {
		t.Fatalf("the fallback granted X while a Redis holder held it (err %v)", err)
	}
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("WithLock = %v, want the fallback refused (ErrUnavailable)", err)
	}
}
