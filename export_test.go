package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
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

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// testHold is a hold of m's handle that no lock call made: a new owner to
// drive the scripts with.
func (m *Mutex) testHold() *hold { return newHold(&m.handle, nil) }

// attempt sends one raw acquire attempt for h.
func (h *hold) attemptRaw(ctx context.Context, ttl time.Duration, count int, entry string, registered bool) (reply, error) {
	return h.attemptNow(ctx, ttl, count, queueing{entry: entry, registered: registered})
}

// field is h's owner field.
func (h *hold) field() string { return h.ownerField }

// lockCtx locks m and returns the hold's context, failing the test on error.
func lockCtx(t testing.TB, m *Mutex) context.Context {
	t.Helper()
	hctx, err := m.LockContext(ctxT(t))
	if err != nil {
		t.Fatalf("LockContext %s: %v", m.Name(), err)
	}
	return hctx
}

// field is the owner field of the handle's current hold ("" when none).
func (hd *handle) field() string {
	if h := hd.lastHold(); h != nil && !hd.idle() {
		return h.field()
	}
	return ""
}

// mustLockTwice takes m and re-enters it with the hold's context: count 2.
func mustLockTwice(t testing.TB, m *Mutex) {
	t.Helper()
	if err := m.Lock(lockCtx(t, m)); err != nil {
		t.Fatalf("re-entering %s: %v", m.Name(), err)
	}
}

// enter takes the handle's gate for a test that builds a hold by hand.
func (m *Mutex) testEnter(ctx context.Context, try bool) bool {
	ok, _ := m.handle.enter(ctx, try)
	return ok
}
