package dlock

import (
	"errors"
	"testing"

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
