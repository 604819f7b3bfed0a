package doctor

import (
	"os"
	"testing"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// shared is the package's redis-server for tests that neither reconfigure
// nor stop it; those start their own.
var shared *testenv.Redis

// SharedAddr is the address the Example connects to.
func SharedAddr() string { return shared.Addr() }

func TestMain(m *testing.M) {
	// testenv.Main runs goleak after the tests.
	os.Exit(testenv.Main(m, "doctor", &shared, nil))
}
