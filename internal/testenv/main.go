package testenv

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is a package's TestMain body for tests that share one redis-server:
// it starts the server and stores it in *shared, runs the tests, runs check
// (if not nil) on the server while it still runs, stops it, and looks for
// leaked goroutines. It returns the exit code for os.Exit. pkg names the
// package in error messages. Call it from TestMain only.
func Main(m *testing.M, pkg string, shared **Redis, check func(*Redis) error) int {
	r, err := StartRedisServer(RedisConfig{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s tests need redis-server: %v\n", pkg, err)
		return 1
	}
	*shared = r
	code := m.Run()
	if code == 0 && check != nil {
		if err := check(r); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", pkg, err)
			code = 1
		}
	}
	_ = r.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: goleak: %v\n", pkg, err)
			code = 1
		}
	}
	return code
}
