package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readPid reads the "pid N" line a CMD prints.
func readPid(t *testing.T, s *started) int {
	t.Helper()
	select {
	case l := <-s.lines:
		var pid int
		if _, err := fmt.Sscanf(l, "pid %d", &pid); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		return pid
	case <-time.After(30 * time.Second):
		t.Fatal("CMD never started")
	}
	return 0
}

// A lost lock ends CMD's whole process group: SIGTERM, then SIGKILL after
// --grace to whatever of the group still runs, even when CMD itself (a
// shell) left at the SIGTERM and a job it started ignores SIGTERM. The job
// used to run on with nobody holding the lock, while another worker took
// it: the "run once" job ran twice at once.
func TestRunLostKillsTheGroup(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs Linux /proc")
	}
	c := newClient(t, shared)
	name := "t-lost-group"
	s := dlockStart(t, "--redis", redisURL(shared), "run", "--watchdog", "300ms", "--grace", "500ms", name, "--",
		"sh", "-c", `(trap '' TERM; exec sleep 40 </dev/null >/dev/null 2>&1) & echo "pid $!"; wait`)
	pid := readPid(t, s)
	if !alive(pid) {
		t.Fatalf("job %d not running", pid)
	}
	if held, err := c.Mutex(name).ForceUnlock(ctxT(t)); err != nil || !held {
		t.Fatalf("ForceUnlock: %v %v", held, err)
	}
	if code := s.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit code %d, want %d; stderr: %s", code, exitLost, s.stderrText())
	}
	deadline := time.Now().Add(3 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("CMD's job %d still running 3s after dlock exited on a lost lock (--grace 500ms); stderr: %s", pid, s.stderrText())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(s.stderrText(), "SIGKILL") {
		t.Errorf("stderr does not mention the SIGKILL: %s", s.stderrText())
	}
}
