package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// doctor's own WAIT is not blamed on Redis. A --replica-timeout under a
// millisecond was sent as WAIT N 0, which blocks for ever, and one longer
// than --timeout outlived the check: both ended in exit 69 "Redis ...
// stopped answering" from a Redis that answered everything, which a script
// reads as an outage.
func TestDoctorReplicaTimeoutNotBlamedOnRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	u := "redis://" + srv.Addr()
	r := dlockRun(t, noNS, "--redis", u, "doctor", "--replica-ack", "1", "--replica-timeout", "1ns", "--timeout", "3s")
	if strings.Contains(r.stderr, "stopped answering") {
		t.Fatalf("--replica-timeout 1ns: exit %d, stderr %q", r.code, r.stderr)
	}
	wantCode(t, r, 1)
	if st := doctorLines(t, r, doctorNames...); st["replicas"] != "fail" {
		t.Fatalf("statuses %v:\n%s", st, r.stdout)
	}
	r = dlockRun(t, noNS, "--redis", u, "doctor", "--replica-ack", "1", "--replica-timeout", "10s", "--timeout", "3s")
	wantCode(t, r, exitUsage)
	usageErr(t, r, "--replica-timeout")
	if r.took > 2*time.Second {
		t.Fatalf("a usage error took %v", r.took)
	}
}
