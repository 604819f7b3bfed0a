package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/testenv"
	"github.com/dlock-dev/dlock/internal/wire"
)

// testenvRedis returns a redis-server of the test's own.
func testenvRedis(t testing.TB) *testenv.Redis {
	t.Helper()
	r := testenv.StartRedis(t)
	// Registered after the server's stop and before the test's clients, so
	// it runs once the clients are closed and before the server stops.
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		if err := checkHygiene(r); err != nil {
			t.Errorf("hygiene: %v", err)
		}
	})
	return r
}

// wire is c's Wire.
func (c *Client) wire() *wire.Wire { return c.e.Wire }

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// hold is a lease of a Mutex driven by hand, for tests of the scripts
// through the engine.
type hold struct{ *lease.Lease }

// reply is a script's answer in its positional form: {1, count, token}
// held, {0, ms to wait} not, {-1} gone; a release's {1, remaining} or {0,
// why gone}.
type reply struct {
	n int
	v [3]int64
}

// testHold is a hold of m's handle that no lock call made: a new owner to
// drive the scripts with.
func (m *Mutex) testHold() hold {
	l, _ := m.hd.TestLease(context.Background(), false)
	return hold{l}
}

// attemptRaw sends one raw acquire attempt for h.
func (h hold) attemptRaw(ctx context.Context, ttl time.Duration, count int, entry string, registered bool) (reply, error) {
	r, err := h.TestAttempt(ctx, ttl, count, lease.Queueing{Entry: entry, Registered: registered})
	switch {
	case err != nil:
		return reply{}, err
	case r.Granted:
		return reply{n: 3, v: [3]int64{1, int64(r.Count), int64(r.Token)}}, nil
	case r.Gone:
		return reply{n: 1, v: [3]int64{-1}}, nil
	}
	return reply{n: 2, v: [3]int64{0, r.Wait.Milliseconds()}}, nil
}

// releaseNow sends one raw release for h.
func (h hold) releaseNow(ctx context.Context, count int, all bool) (reply, error) {
	r, err := h.ReleaseNow(ctx, count, all)
	if err != nil || !r.Found {
		return reply{n: 2, v: [3]int64{0, r.Why}}, err
	}
	return reply{n: 2, v: [3]int64{1, int64(r.Remaining)}}, nil
}

// field is h's owner field.
func (h hold) field() string { return h.Field() }

// lockCtx locks m and returns the hold's context, failing the test on error.
func lockCtx(t testing.TB, m *Mutex) context.Context {
	t.Helper()
	hctx, err := m.LockContext(ctxT(t))
	if err != nil {
		t.Fatalf("LockContext %s: %v", m.Name(), err)
	}
	return hctx
}

// mustLockTwice takes m and re-enters it with the hold's context: count 2.
func mustLockTwice(t testing.TB, m *Mutex) {
	t.Helper()
	if err := m.Lock(lockCtx(t, m)); err != nil {
		t.Fatalf("re-entering %s: %v", m.Name(), err)
	}
}

// goneCode is why_gone's code for a field that expired or was released.
const goneCode = lease.CodeGone

// current is the hold an Unlock with ctx would release.
func (m *Mutex) current(ctx context.Context) hold {
	h, _ := m.hd.Current(ctx)
	return hold{h}
}

// testEnter takes m's gate and returns a hold no lock call made.
func (m *Mutex) testEnter(ctx context.Context) (hold, bool) {
	l, ok := m.hd.TestLease(ctx, true)
	return hold{l}, ok
}

// isRedisError reports whether err is an error reply from Redis.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

var driftMargin = lease.DriftMargin

// semLua is a semaphore script's source as the library sends it.
func semLua(file string) string { return kind.Source("sem_lib.lua") + kind.Source(file) }

// semKeys are the keys the semaphore scripts take.
func semKeys(s *Semaphore) []string {
	ks := s.p.Keys()
	return []string{ks.Permits, ks.Size, ks.Queue, ks.Seen}
}

// chanOf is the release channel m's waiters listen on.
func chanOf(m *Mutex) string {
	ch, _ := m.p.Channel()
	return ch
}

// WithRecheckForTest is withRecheck, for the external tests: how often a
// waiter re-checks a lock on its own.
func WithRecheckForTest(d time.Duration) Option { return withRecheck(d) }

// ResolveForTest is what opts come to, for the external tests.
func ResolveForTest(opts ...LockOption) (FallbackRequest, error) { return resolve("", opts) }

// reliabilityRow is a row of RELIABILITY.md recorded by a test of this
// package (the fault suite's table lives in package dlock_test, which sets
// ReliabilityHook).
type reliabilityRow struct {
	Scenario, Faults string
	Grants           int
	Accepted, Told   int
	Signal           time.Duration // < 0: none
	Notes            string
}

// ReliabilityHook records a row of RELIABILITY.md; set by the fault suite.
var ReliabilityHook func(t *testing.T, scenario, faults string, grants, accepted, told int, signal time.Duration, notes string)

func recordReliability(t *testing.T, r reliabilityRow) {
	t.Helper()
	if ReliabilityHook != nil {
		ReliabilityHook(t, r.Scenario, r.Faults, r.Grants, r.Accepted, r.Told, r.Signal, r.Notes)
	}
}

// handleCount is how many handles c's registry refers to.
func (c *Client) handleCount() int { return c.handles.len() }

// privateMutex is a Mutex handle of c's outside its registry: several of
// them on one name wait in Redis side by side (as one Client's readers and
// permits do), where the handle Client.Mutex returns lets one at a time
// through its gate. For tests of the engine's waiting.
func privateMutex(c *Client, name string) *Mutex {
	m, _ := newMutex(c, name)
	return m
}

// privateFairMutex is privateMutex for a FairMutex.
func privateFairMutex(c *Client, name string) *FairMutex {
	f, _ := newFairMutex(c, name)
	return f
}

// gateWaiters is how many goroutines of m's Client wait at its gate.
func gateWaiters(m *Mutex) int { return m.hd.GateWaiters() }

// holderField is the owner field of m's current lease in Redis, or "".
func holderField(m *Mutex) string { return m.hd.Owner() }

// PipingForTest reports whether c's pipe has a connection in use.
func PipingForTest(c *Client) bool { return c.wire().Piping() }

// PipeCallsForTest returns how many calls c's pipe has written.
func PipeCallsForTest(c *Client) int64 {
	_, calls := c.wire().PipeStats()
	return calls
}

// PipeConnsForTest returns how many connections c's pipe has put in use.
func PipeConnsForTest(c *Client) int64 { return c.wire().PipeConns() }
