package dlock

import (
	"errors"
	"testing"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// testenvRedis returns a redis-server of the test's own.
func testenvRedis(t testing.TB) *testenv.Redis {
	t.Helper()
	return testenv.StartRedis(t)
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
