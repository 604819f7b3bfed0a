package sqllock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/sqllock"
)

// TestFencingTokens: tokens of one name strictly increase across grants,
// also across Lockers (processes) and separate pools; each is at least the
// database clock in microseconds when granted; a floor (the last token of
// another tier) lifts the next token above it, and later tokens stay above;
// a dlock.Grant made with ContextWithGrant is no floor for WithLock.
func TestFencingTokens(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db1, db2, admin := b.open(t), b.open(t), b.open(t)
		lockers := []*sqllock.Locker{b.newLocker(t, db1), b.newLocker(t, db2)}
		ctx := ctxT(t, 30*time.Second)
		name := fmt.Sprintf("fence:%s:%d", b.name, time.Now().UnixNano())
		var last uint64
		grant := func(l *sqllock.Locker, floor uint64) uint64 {
			t.Helper()
			clock := uint64(b.now(t, admin))
			h, err := l.Acquire(ctx, name, dlock.FallbackRequest{Wait: 5 * time.Second}, floor)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := h.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}()
			tok := h.Token()
			if tok <= last || tok < clock || tok <= floor {
				t.Fatalf("token %d: previous %d, clock before %d, floor %d", tok, last, clock, floor)
			}
			if g := h.Grant(); g.Token != tok || g.Name != name || g.Backend != b.name {
				t.Fatalf("Grant %+v", g)
			}
			last = tok
			return tok
		}
		for i := 0; i < 6; i++ {
			grant(lockers[i%2], 0)
		}
		// A floor far ahead of the clock (a Redis counter that ran ahead).
		high := last + 1e12
		if tok := grant(lockers[0], high); tok != high+1 {
			t.Fatalf("token after floor %d = %d, want %d", high, tok, high+1)
		}
		if tok := grant(lockers[1], 0); tok != high+2 {
			t.Fatalf("token after the floored one = %d, want %d", tok, high+2)
		}
		// Through WithLock, a grant made with ContextWithGrant is no floor
		// (a Redis hold's is: TestHeldGrantIsTheFloor).
		made := dlock.ContextWithGrant(ctx, dlock.Grant{Name: name, Token: high + 1000, Backend: dlock.BackendRedis})
		err := lockers[0].WithLock(made, name, func(fctx context.Context) error {
			if tok := dlock.TokenFrom(fctx); tok != high+3 {
				t.Errorf("WithLock token %d, want %d", tok, high+3)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Nor is a grant of another name.
		other := dlock.ContextWithGrant(ctx, dlock.Grant{Name: name + "x", Token: high + 1e9})
		err = lockers[0].WithLock(other, name, func(fctx context.Context) error {
			if tok := dlock.TokenFrom(fctx); tok != high+4 {
				t.Errorf("token %d, want %d", tok, high+4)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// resource is what a lock protects: it counts holders per name and checks
// that each new holder's token is greater than every earlier one of the
// name (what a fenced store would enforce).
type resource struct {
	mu       sync.Mutex
	holders  map[string]int
	last     map[string]uint64
	grants   int
	overlaps int
	stale    int
}

func (r *resource) enter(name string, tok uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holders[name]++
	if r.holders[name] > 1 {
		r.overlaps++
	}
	if tok <= r.last[name] {
		r.stale++
	}
	r.last[name] = tok
	r.grants++
}

func (r *resource) leave(name string) {
	r.mu.Lock()
	r.holders[name]--
	r.mu.Unlock()
}

// TestContention: 12 goroutines in 3 Lockers (three processes, each with
// its own pool) contend for 3 names. No two holders of a name ever overlap
// and tokens strictly increase per name, in the order the resource sees
// the holders.
func TestContention(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		var lockers []*sqllock.Locker
		for i := 0; i < 3; i++ {
			lockers = append(lockers, b.newLocker(t, b.open(t)))
		}
		ctx := ctxT(t, 60*time.Second)
		names := []string{"hot:a", "hot:b", "hot:c"}
		res := &resource{holders: map[string]int{}, last: map[string]uint64{}}
		const workers, rounds = 12, 8
		var wg sync.WaitGroup
		errs := make(chan error, workers*rounds)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := lockers[w%len(lockers)]
				for i := 0; i < rounds; i++ {
					name := names[(w+i)%len(names)]
					err := l.WithLock(ctx, name, func(fctx context.Context) error {
						res.enter(name, dlock.TokenFrom(fctx))
						time.Sleep(time.Millisecond)
						res.leave(name)
						return nil
					}, dlock.WaitTime(30*time.Second))
					if err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if res.overlaps != 0 || res.stale != 0 || res.grants != workers*rounds {
			t.Fatalf("%d grants (want %d), %d overlaps, %d stale tokens", res.grants, workers*rounds, res.overlaps, res.stale)
		}
	})
}

// TestFenceTable: Setup creates the configured fence table (once, and
// again harmlessly), and tokens are kept there.
func TestFenceTable(t *testing.T) {
	each(t, func(t *testing.T, b backend) {
		db, admin := b.open(t), b.open(t)
		table := fmt.Sprintf("fence_%d", time.Now().UnixNano())
		ctx := ctxT(t, 30*time.Second)
		defer func() { _, _ = admin.ExecContext(ctx, "DROP TABLE "+table) }()
		for i := 0; i < 2; i++ {
			l := b.newLocker(t, db, sqllock.FenceTable(table))
			if err := l.Setup(ctx); err != nil {
				t.Fatal(err)
			}
			h, err := l.Acquire(ctx, "fence-table", dlock.FallbackRequest{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			var stored uint64
			if err := admin.QueryRowContext(ctx, "SELECT token FROM "+table).Scan(&stored); err != nil || stored != h.Token() {
				t.Fatalf("stored token %d (%v), hold's %d", stored, err, h.Token())
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
