package testenv

import (
	"fmt"
	"os"
	"testing"
	"time"

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
		if err := FindLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: goleak: %v\n", pkg, err)
			code = 1
		}
	}
	return code
}

// FindLeaks is goleak.Find with time for goroutines that end on their own
// shortly after the tests: go-redis's pool, after failing to dial a server
// a test stopped, dials again every second until its pool is closed, so its
// goroutine outlives Close by up to a second (goleak's own retries wait about
// half that). A goroutine still running after leakGrace is a leak.
func FindLeaks() error {
	deadline := time.Now().Add(leakGrace)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leakGrace is how long FindLeaks lets goroutines end: twice go-redis's
// redial interval.
const leakGrace = 2 * time.Second
