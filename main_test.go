package dlock

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// shared is the package's redis-server for tests that do not kill, pause or
// restart it; those start their own. Tests on it use names of their own.
var shared *testenv.Redis

// SharedRedisAddr is the address the Examples connect to.
func SharedRedisAddr() string { return shared.Addr() }

func TestMain(m *testing.M) {
	// The first-contact report (doctor's checks) would add commands to
	// the tests that count them; TestFirstContactReport turns it on.
	reportAtFirstContact = false
	os.Exit(testenv.Main(m, "dlock", &shared, func(r *testenv.Redis) error {
		return checkHygiene(r)
	}))
}

// checkHygiene runs after every test of the package: no subscription may be
// left, and every key must carry a TTL.
func checkHygiene(r *testenv.Redis) error {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer rdb.Close()
	// Subscriptions of closed clients vanish with their connections.
	deadline := time.Now().Add(5 * time.Second)
	for {
		chans, err := rdb.PubSubChannels(ctx, "*").Result()
		if err != nil {
			return err
		}
		if len(chans) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("channels still subscribed after the tests: %v", chans)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var bad []string
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if strings.HasPrefix(k, "permanent:") {
			continue // written by tests on purpose
		}
		if ttl, err := rdb.PTTL(ctx, k).Result(); err == nil && ttl == -1 {
			bad = append(bad, k)
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("keys without a TTL after the tests: %v", bad)
	}
	return nil
}

// rdbFor returns a go-redis client for r, closed when the test ends.
func rdbFor(t testing.TB, r *testenv.Redis) *redis.Client {
	t.Helper()
	return r.NewClient(t)
}

// newClient returns a dlock Client on its own connection pool to r, closed
// (and checked to close cleanly) when the test ends.
func newClient(t testing.TB, r *testenv.Redis, opts ...Option) *Client {
	t.Helper()
	return newClientOn(t, rdbFor(t, r), opts...)
}

// newClientOn is newClient on a go-redis client of the test's making (a
// Cluster client, a user of its own).
func newClientOn(t testing.TB, rdb redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	c, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	testClients.Lock()
	testClients.of[t] = append(testClients.of[t], c)
	testClients.Unlock()
	t.Cleanup(func() {
		testClients.Lock()
		delete(testClients.of, t)
		testClients.Unlock()
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// testClients are the Clients each running test made with newClientOn.
var testClients = struct {
	sync.Mutex
	of map[testing.TB][]*Client
}{of: map[testing.TB][]*Client{}}

// resetCounts resets r's command counts once every Client of the test is
// settled: a Client's first grant subscribes its channel in the background,
// and the channel's confirmation has the watchdog renew every hold at once
// (a force sent before it would be missed): a count of commands that
// follows must not see that renewal.
func resetCounts(t testing.TB, ctx context.Context, r *testenv.Redis) {
	t.Helper()
	testClients.Lock()
	cs := append([]*Client(nil), testClients.of[t]...)
	testClients.Unlock()
	for _, c := range cs {
		if c.cfg.SpinMin > 0 {
			continue // no channel
		}
		waitFor(t, "the Client's channel confirmed and its holds renewed", func() bool {
			if c.e.Renewals() == 0 {
				return true
			}
			select {
			case <-c.e.Hub().ClientReady():
				return c.e.RenewalsQuiet()
			default:
				return false
			}
		})
	}
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// commands returns the calls of each command since the last reset.
func commands(t testing.TB, r *testenv.Redis) map[string]int64 {
	t.Helper()
	s, err := r.CommandStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// awaitNil waits up to within for a nil result on got, failing with msg if
// none arrives in time.
func awaitNil(t testing.TB, got <-chan error, within time.Duration, msg string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(within):
		t.Fatal(msg)
	}
}

func mustLock(t testing.TB, m *Mutex) {
	t.Helper()
	if err := m.Lock(ctxT(t)); err != nil {
		t.Fatalf("Lock %s: %v", m.Name(), err)
	}
}

func mustUnlock(t testing.TB, m *Mutex) {
	t.Helper()
	if err := m.Unlock(ctxT(t)); err != nil {
		t.Fatalf("Unlock %s: %v", m.Name(), err)
	}
}
