package tier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/lease"
)

// tokenWorld is X in both tiers with fencing tokens: the fake Redis counter
// starts low (a counter sequence that began long ago), the fake fallback's
// tokens start at the database clock (high), as the real tiers' do. Raise
// lifts the Redis counter unless failRaises is above 0 (each failure counts
// it down).
type tokenWorld struct {
	mu         sync.Mutex
	redisUp    bool
	redisTok   uint64
	sqlTok     uint64
	failRaises int
	raised     []uint64 // tokens of the raises that succeeded
}

func (w *tokenWorld) Backend() string { return "fake" }

func (w *tokenWorld) Run(ctx context.Context, req Request, fn func(context.Context) error) error {
	w.mu.Lock()
	w.sqlTok = max(w.sqlTok+1, req.TokenFloor+1, 1_000_000)
	tok := w.sqlTok
	w.mu.Unlock()
	return fn(lease.ContextWithHeldGrant(ctx, lease.Grant{Name: req.Name, Token: tok, Backend: "fake"}))
}

func (w *tokenWorld) redis(ctx context.Context, req Request, fn func(context.Context) error) error {
	w.mu.Lock()
	if !w.redisUp {
		w.mu.Unlock()
		return fmt.Errorf("%w: connection refused", lease.ErrUnavailable)
	}
	w.redisTok++
	tok := w.redisTok
	w.mu.Unlock()
	return fn(lease.ContextWithHeldGrant(ctx, lease.Grant{Name: req.Name, Token: tok, Backend: lease.BackendRedis}))
}

func (w *tokenWorld) raise(_ context.Context, _ string, tok uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failRaises > 0 {
		w.failRaises--
		return errors.New("raise: connection reset")
	}
	w.redisTok = max(w.redisTok, tok)
	w.raised = append(w.raised, tok)
	return nil
}

// tiers are Tiers over w: a quarantine of 10 ms, a recovery window of 50 ms.
func (w *tokenWorld) tiers() *Tiers {
	return New(Config{
		Fallback: w, Breaker: closedBreaker{}, Quarantine: 10 * time.Millisecond, Recovery: 50 * time.Millisecond,
		ClientID: "c", Watchdog: 10 * time.Millisecond, Redis: w.redis, Raise: w.raise,
		Detach: func(f func(context.Context)) { go f(context.Background()) },
		Logger: slog.New(slog.DiscardHandler),
	})
}

func (w *tokenWorld) set(f func(w *tokenWorld)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w)
}

// A Redis grant in the recovery window takes the fallback lock, runs fn
// with the fallback's token and lifts the Redis counter to it. When that
// lift fails, a later Redis grant of the name must not hand out a Redis
// token below the fallback's (a fencing store would reject the legitimate
// later holder): this Client keeps taking the fallback lock for the name,
// and lifting again, until a lift succeeded. Tokens seen by fn only grow.
func TestFailedRaiseKeepsTokensIncreasing(t *testing.T) {
	w := &tokenWorld{}
	tiers := w.tiers()
	var seen []uint64
	var backends []string
	lock := func() {
		t.Helper()
		err := tiers.WithLock(context.Background(), Request{Name: "X", Wait: time.Second}, func(ctx context.Context) error {
			g, _ := lease.GrantFrom(ctx)
			seen = append(seen, g.Token)
			backends = append(backends, g.Backend)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	lock() // Redis down: the fallback grants, after the quarantine
	w.set(func(w *tokenWorld) { w.redisUp, w.failRaises = true, 1 })
	lock()                            // recovery: Redis and the fallback, whose token the lift fails to pass on
	time.Sleep(80 * time.Millisecond) // the recovery window is over
	lock()                            // the name's lift is still owed
	lock()
	lock()
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("tokens went backwards: %v (backends %v)", seen, backends)
		}
	}
	w.mu.Lock()
	raised := w.raised
	w.mu.Unlock()
	if len(raised) == 0 {
		t.Fatalf("the lift was never retried (tokens %v, backends %v)", seen, backends)
	}
	// Once lifted, the name is back on Redis alone: the last grant's token
	// is the Redis counter's.
	w.mu.Lock()
	last := w.redisTok
	w.mu.Unlock()
	if seen[len(seen)-1] != last || tiers.recovering("X") {
		t.Fatalf("the name stayed on the fallback lock after a lift succeeded: tokens %v, Redis counter %d", seen, last)
	}
}

// A name granted by the fallback during an outage and next locked after
// the recovery window: its first Redis grant must not hand out a token
// below the fallback's (the Redis counter kept counting from long ago).
// Before, only Redis grants inside the recovery window lifted the counter;
// now every fallback grant leaves a lift owed for its name.
func TestFallbackGrantOwesALift(t *testing.T) {
	w := &tokenWorld{}
	tiers := w.tiers()
	var seen []uint64
	lock := func() {
		t.Helper()
		err := tiers.WithLock(context.Background(), Request{Name: "Y", Wait: time.Second}, func(ctx context.Context) error {
			g, _ := lease.GrantFrom(ctx)
			seen = append(seen, g.Token)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	lock() // Redis down: the fallback grants
	w.set(func(w *tokenWorld) { w.redisUp = true })
	tiers.ReachedRedis()              // a renewal of another hold: the outage is over
	time.Sleep(80 * time.Millisecond) // the recovery window is over
	lock()
	lock()
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("tokens went backwards after the recovery window: %v", seen)
		}
	}
	if tiers.recovering("Y") {
		t.Fatal("the name stayed on the fallback lock after its lift")
	}
}
