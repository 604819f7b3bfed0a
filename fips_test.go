package dlock

import (
	"context"
	"crypto/fips140"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// fipsChildEnv marks the test binary that TestFIPS140Only starts.
const fipsChildEnv = "DLOCK_TEST_FIPS140_CHILD"

// A program that imports dlock starts, locks and unlocks under
// GODEBUG=fips140=only, where any use of crypto/sha1 panics (before the
// fix, package init did: wire.NewScript hashed every script). The test
// binary runs itself again in that mode, with only TestFIPS140OnlyChild,
// which starts its own redis-server (TestMain) and does the work.
func TestFIPS140Only(t *testing.T) {
	if os.Getenv(fipsChildEnv) != "" {
		t.Skip("this is the child")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestFIPS140OnlyChild$", "-test.count=1", "-test.v", "-test.timeout=90s")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=only", fipsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFIPS140OnlyChild") {
		t.Fatalf("the test binary under GODEBUG=fips140=only: %v\n%s", err, out)
	}
}

// TestFIPS140OnlyChild is TestFIPS140Only's child: it runs only in the
// process that test starts. It takes the code paths that run scripts: the
// first call of each script, a call after SCRIPT FLUSH (NOSCRIPT), a
// namespace's variants of the scripts, renewal, and the first-contact
// report.
func TestFIPS140OnlyChild(t *testing.T) {
	if os.Getenv(fipsChildEnv) == "" {
		t.Skip("runs only as TestFIPS140Only's child, under GODEBUG=fips140=only")
	}
	if !fips140.Enforced() {
		t.Fatal("GODEBUG=fips140=only is not in force in the child")
	}
	reportAtFirstContact = true
	defer func() { reportAtFirstContact = false }()
	ctx := ctxT(t)
	for _, opts := range [][]Option{nil, {WithNamespace("fips")}} {
		c := newClient(t, shared, append(opts, WithWatchdogTimeout(1500*time.Millisecond))...)
		for i := range 3 {
			m := c.Mutex("fips:cycle")
			mustLock(t, m)
			if i == 1 {
				if err := rdbFor(t, shared).ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(700 * time.Millisecond) // a renewal (every 500 ms) after the flush
			}
			mustUnlock(t, m)
		}
		rw := c.RWMutex("fips:rw")
		if err := rw.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rw.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
