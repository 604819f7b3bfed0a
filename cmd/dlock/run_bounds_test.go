package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// waitStderr waits until s's stderr contains want, for 30s at most.
func (s *started) waitStderr(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.stderrText(), want) {
		select {
		case <-s.done:
			if strings.Contains(s.stderrText(), want) {
				return
			}
			t.Fatalf("dlock exited without printing %q; stderr: %s", want, s.stderrText())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q on stderr within 30s; stderr: %s", want, s.stderrText())
		}
	}
}

// Against a Redis that hangs (SIGSTOP) while CMD runs, every phase after
// the loss is bounded and said: the loss (with its reason) and the SIGTERM,
// the release that Redis does not answer, its failure and what becomes of
// the lock; dlock exits 76 within the stated bound of CMD's exit
// (releaseTimeout + closeTimeout) plus slack, where it used to wait 10s in
// silence (a 5s release, then the Client's 5s Close).
func TestRunRedisHangs(t *testing.T) {
	r := testenv.StartRedis(t)
	name := "t-hangs"
	s := dlockStart(t, "--redis", redisURL(r), "run", "--watchdog", "1s", "--grace", "5s", name, "--",
		"sh", "-c", "trap 'exit 0' TERM; echo ready; sleep 30 & wait")
	s.waitLine(t, "ready")
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Resume() })
	// CMD leaves at once on SIGTERM: from here on dlock waits for Redis only.
	s.waitStderr(t, "lost the lock "+name)
	bound := releaseTimeout + closeTimeout
	if code := s.wait(t, bound+3*time.Second); code != exitLost {
		t.Fatalf("exit code %d, want %d; stderr: %s", code, exitLost, s.stderrText())
	}
	out := s.stderrText()
	for _, want := range []string{
		"dlock: lost the lock " + name + ": ", // the reason follows
		"; sending SIGTERM to sh, SIGKILL in 5s",
		"dlock: sh exited; releasing " + name + " (up to " + releaseTimeout.String() + ")",
		"dlock: could not release " + name + ": no answer from Redis within " + releaseTimeout.String() +
			"; it expires by its TTL in Redis (at most --watchdog, 1s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	// The help states the bound this test holds dlock to.
	help := dlockRun(t, nil, "run", "--help")
	if !strings.Contains(strings.Join(strings.Fields(help.stdout), " "), "dlock exits at most "+bound.String()+" after CMD") {
		t.Errorf("run --help does not state the %v bound:\n%s", bound, help.stdout)
	}
}

// A Redis that refuses dlock (a wrong password, none where one is needed)
// is named with its own reply and exit 77, at once: it is not "cannot
// reach Redis" (69), and CMD does not run.
func TestRunRedisRefuses(t *testing.T) {
	r := testenv.StartRedis(t)
	if _, err := r.Do(ctxT(t), "CONFIG", "SET", "requirepass", "right-pw"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ url, reply string }{
		{"redis://:wrong-pw@" + r.Addr(), "WRONGPASS"},
		{"redis://" + r.Addr(), "NOAUTH"},
	} {
		res := dlockRun(t, nil, "--redis", tc.url, "run", "t-refused", "--", "echo", "ran")
		wantCode(t, res, exitRefused)
		oneLineErr(t, res, "Redis at "+r.Addr()+" refused dlock: "+tc.reply)
		if strings.Contains(res.stderr, "cannot reach") || strings.Contains(res.stderr, "wrong-pw") || res.stdout != "" {
			t.Fatalf("--redis %s: stdout %q stderr %q", redactURL(tc.url), res.stdout, res.stderr)
		}
	}
}

// A Redis that answers PING but not the lock's script (CLIENT PAUSE WRITE
// holds every script call) is unavailable: dlock says so and exits 69 when
// --wait runs out, not 1 with a bare error.
func TestRunRedisUnavailableWhileWaiting(t *testing.T) {
	r := testenv.StartRedis(t)
	if _, err := r.Do(ctxT(t), "CLIENT", "PAUSE", "60000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = r.Do(ctxT(t), "CLIENT", "UNPAUSE") })
	res := dlockRun(t, nil, "--redis", redisURL(r), "run", "--wait", "1s", "t-paused", "--", "echo", "ran")
	wantCode(t, res, exitUnavailable)
	oneLineErr(t, res, "no answer from Redis at "+r.Addr()+` to the lock call for "t-paused" (--wait 1s)`)
	if res.stdout != "" {
		t.Fatalf("CMD ran: %q", res.stdout)
	}
}
