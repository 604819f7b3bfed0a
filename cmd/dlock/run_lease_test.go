package main

import (
	"strings"
	"testing"
)

// A --lease below a millisecond, which the library refuses as an invalid
// argument, is a usage error (exit 2), not 69, "Redis could not be
// reached", which a script retries for ever.
func TestRunSubMillisecondLeaseIsUsage(t *testing.T) {
	for _, lease := range []string{"1ns", "999us"} {
		r := dlockRun(t, nil, "--redis", redisURL(shared), "run", "--lease", lease, "t-sub-ms-lease", "--", "echo", "ran")
		wantCode(t, r, exitUsage)
		usageErr(t, r, "--lease")
		if r.stdout != "" || strings.Contains(r.stderr, "acquiring") {
			t.Fatalf("--lease %s: stdout %q stderr %q", lease, r.stdout, r.stderr)
		}
	}
}
