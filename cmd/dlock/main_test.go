package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// The tests run the real program as a child process: this test binary
// re-executed with asCLI set runs Main instead of the tests, so exit codes
// and signals are tested for real without a separate go build.
const asCLI = "DLOCK_CLI_TEST_RUN_MAIN"

// shared is the redis-server of tests that do not need their own; each test
// uses lock names of its own.
var shared *testenv.Redis

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
	}
	os.Exit(testenv.Main(m, "cmd/dlock", &shared, nil))
}

func redisURL(r *testenv.Redis) string { return "redis://" + r.Addr() }

// cli prepares the dlock program with args; env entries are added to the
// environment, from which DLOCK_REDIS_URL is removed.
func cli(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envRedisURL+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// The race detector sleeps a second at exit unless told otherwise.
	cmd.Env = append(cmd.Env, asCLI+"=1", "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// dlockRun runs dlock to completion (60s at most).
func dlockRun(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := cli(ctx, env, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("dlock %v: %v", args, err)
		}
		res.code = ee.ExitCode()
	}
	return res
}

func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
}

// oneLineErr checks that stderr is one "dlock: ..." line containing want.
func oneLineErr(t *testing.T, r result, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "dlock: ") || !strings.Contains(lines[0], want) {
		t.Fatalf("stderr %q: want one line starting with \"dlock: \" containing %q", r.stderr, want)
	}
}

// usageErr checks that stderr is a "dlock: ..." line containing want, then
// the hint to run dlock --help.
func usageErr(t *testing.T, r result, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "dlock: ") || !strings.Contains(lines[0], want) || lines[1] != "Run 'dlock --help' for usage." {
		t.Fatalf("stderr %q: want a line starting with \"dlock: \" containing %q, then the --help hint", r.stderr, want)
	}
}

// started is a dlock process still running, with its stdout read line by line.
type started struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *lockedBuffer
	done   chan struct{}
	err    error
}

// lockedBuffer is a bytes.Buffer safe to read while the child writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// stderrText is what dlock wrote to stderr so far.
func (s *started) stderrText() string { return s.stderr.String() }

func dlockStart(t *testing.T, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	s := &started{cmd: cli(ctx, nil, args...), lines: make(chan string, 100), stderr: &lockedBuffer{}, done: make(chan struct{})}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
	})
	return s
}

func (s *started) waitLine(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("dlock exited before printing %q; stderr: %s", want, s.stderr)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q within 30s", want)
		}
	}
}

func (s *started) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(within):
		t.Fatalf("dlock still running after %v; stderr: %s", within, s.stderr)
	}
	if s.err == nil {
		return 0
	}
	ee, ok := s.err.(*exec.ExitError)
	if !ok {
		t.Fatal(s.err)
	}
	return ee.ExitCode()
}

func newClient(t *testing.T, r *testenv.Redis, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(r.NewClient(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRunPassesExitCode(t *testing.T) {
	u := redisURL(shared)
	wantCode(t, dlockRun(t, nil, "--redis", u, "run", "t-exit", "--", "sh", "-c", "exit 7"), 7)
	r := dlockRun(t, nil, "--redis", u, "run", "t-exit", "--", "sh", "-c", "echo hello; echo oops >&2")
	wantCode(t, r, 0)
	if r.stdout != "hello\n" || r.stderr != "oops\n" {
		t.Fatalf("CMD's output not passed through: %q %q", r.stdout, r.stderr)
	}
	// Without "--", and CMD's own flags are CMD's.
	wantCode(t, dlockRun(t, nil, "--redis", u, "run", "--wait", "1s", "t-exit", "sh", "-c", "exit 3"), 3)
	// Killed by a signal: 128+N, as a shell reports it.
	wantCode(t, dlockRun(t, nil, "--redis", u, "run", "t-exit", "--", "sh", "-c", "kill -KILL $$"), 128+9)
	wantCode(t, dlockRun(t, nil, "--redis", u, "run", "t-exit", "--", "/nonexistent/cmd"), 127)
	// The lock is free again afterwards.
	if n, err := shared.Do(ctxT(t), "EXISTS", "t-exit"); err != nil || n.(int64) != 0 {
		t.Fatalf("lock left behind: %v %v", n, err)
	}
}

func TestRunHoldsTheLock(t *testing.T) {
	c := newClient(t, shared)
	s := dlockStart(t, "--redis", redisURL(shared), "run", "t-holds", "--", "sh", "-c", "echo ready; exec sleep 30")
	s.waitLine(t, "ready")
	m := c.Mutex("t-holds")
	if ok, err := m.TryLock(ctxT(t), 0, 0); ok || err != nil {
		t.Fatalf("TryLock while dlock run holds it: %v %v", ok, err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit code %d, want sleep's 143; stderr: %s", code, s.stderr)
	}
	if ok, err := m.TryLock(ctxT(t), 0, 0); !ok || err != nil {
		t.Fatalf("TryLock after dlock run ended: %v %v", ok, err)
	}
	_ = m.Unlock(ctxT(t))
}

func TestRunNotAcquired(t *testing.T) {
	c := newClient(t, shared)
	m := c.Mutex("t-busy")
	if err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(context.Background())
	r := dlockRun(t, nil, "--redis", redisURL(shared), "run", "--wait", "300ms", "t-busy", "--", "echo", "ran")
	wantCode(t, r, exitNotAcquired)
	oneLineErr(t, r, "t-busy not acquired within 300ms")
	if r.stdout != "" {
		t.Fatalf("CMD ran: %q", r.stdout)
	}
	if r.took < 300*time.Millisecond {
		t.Fatalf("gave up after %v, before --wait", r.took)
	}
	r = dlockRun(t, nil, "--redis", redisURL(shared), "run", "--wait", "0", "t-busy", "--", "echo", "ran")
	wantCode(t, r, exitNotAcquired)
}

func TestRunLost(t *testing.T) {
	c := newClient(t, shared)
	cases := []struct {
		name, script string
		extra        []string
		force        bool
	}{
		{"force-unlock", "echo ready; exec sleep 30", []string{"--watchdog", "300ms"}, true},
		// CMD ignores SIGTERM: SIGKILL after --grace.
		{"sigkill-after-grace", "trap '' TERM; echo ready; exec sleep 30", []string{"--watchdog", "300ms", "--grace", "300ms"}, true},
		// A fixed lease that runs out while CMD runs is a loss too.
		{"lease-expired", "echo ready; exec sleep 30", []string{"--lease", "500ms"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "t-lost-" + tc.name
			args := append([]string{"--redis", redisURL(shared), "run"}, tc.extra...)
			args = append(args, name, "--", "sh", "-c", tc.script)
			s := dlockStart(t, args...)
			s.waitLine(t, "ready")
			start := time.Now()
			if tc.force {
				held, err := c.Mutex(name).ForceUnlock(ctxT(t))
				if err != nil || !held {
					t.Fatalf("ForceUnlock: %v %v", held, err)
				}
			}
			if code := s.wait(t, 15*time.Second); code != exitLost {
				t.Fatalf("exit code %d, want %d; stderr: %s", code, exitLost, s.stderr)
			}
			if !strings.Contains(s.stderr.String(), "lost the lock "+name) {
				t.Fatalf("stderr: %s", s.stderr)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("took %v to stop CMD", d)
			}
		})
	}
}

func TestRunForwardsSignals(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGTERM, 42}, {syscall.SIGINT, 43}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			name := fmt.Sprintf("t-signal-%d", tc.sig)
			trap := fmt.Sprintf("trap 'kill $!; exit %d' %s", tc.code, strings.TrimPrefix(tcName(tc.sig), "SIG"))
			s := dlockStart(t, "--redis", redisURL(shared), "run", name, "--", "sh", "-c",
				trap+"; sleep 30 </dev/null >/dev/null 2>&1 & echo ready; wait")
			s.waitLine(t, "ready")
			if err := s.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if code := s.wait(t, 10*time.Second); code != tc.code {
				t.Fatalf("exit code %d, want CMD's %d; stderr: %s", code, tc.code, s.stderr)
			}
			if n, err := shared.Do(ctxT(t), "EXISTS", name); err != nil || n.(int64) != 0 {
				t.Fatalf("lock not released after CMD exited: %v %v", n, err)
			}
		})
	}
}

func tcName(s syscall.Signal) string {
	if s == syscall.SIGINT {
		return "INT"
	}
	return "TERM"
}

func TestRunInterruptedWhileWaiting(t *testing.T) {
	c := newClient(t, shared)
	m := c.Mutex("t-interrupt")
	if err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(context.Background())
	s := dlockStart(t, "--redis", redisURL(shared), "run", "--wait", "30s", "t-interrupt", "--", "echo", "ran")
	// Wait until it is queued for the lock.
	rdb := shared.NewClient(t)
	deadline := time.Now().Add(10 * time.Second)
	for rdb.LLen(ctxT(t), keys.For("t-interrupt").Queue).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("dlock run never queued for the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.wait(t, 10*time.Second); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit code %d; stderr: %s", code, s.stderr)
	}
	if !strings.Contains(s.stderr.String(), "interrupted") {
		t.Fatalf("stderr: %s", s.stderr)
	}
	if n := rdb.LLen(ctxT(t), keys.For("t-interrupt").Queue).Val(); n != 0 {
		t.Fatalf("left %d entries in the queue", n)
	}
}

func TestRunFair(t *testing.T) {
	u := redisURL(shared)
	wantCode(t, dlockRun(t, nil, "--redis", u, "run", "--fair", "t-fair", "--", "sh", "-c", "exit 5"), 5)

	c := newClient(t, shared)
	ctx := ctxT(t)
	holder := c.FairMutex("t-fair")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, nil, "--redis", u, "run", "--fair", "--wait", "100ms", "t-fair", "--", "true")
	wantCode(t, r, exitNotAcquired)

	// Two queued runs are served in arrival order.
	out := t.TempDir() + "/order"
	rdb := shared.NewClient(t)
	queued := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for rdb.LLen(ctx, keys.For("t-fair").Queue).Val() != n {
			if time.Now().After(deadline) {
				t.Fatalf("queue never reached %d", n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	first := dlockStart(t, "--redis", u, "run", "--fair", "--wait", "20s", "t-fair", "--", "sh", "-c", "echo first >> "+out)
	queued(1)
	second := dlockStart(t, "--redis", u, "run", "--fair", "--wait", "20s", "t-fair", "--", "sh", "-c", "echo second >> "+out)
	queued(2)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if c1, c2 := first.wait(t, 15*time.Second), second.wait(t, 15*time.Second); c1 != 0 || c2 != 0 {
		t.Fatalf("exit codes %d %d; stderr %s %s", c1, c2, first.stderr, second.stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil || string(got) != "first\nsecond\n" {
		t.Fatalf("order %q %v", got, err)
	}
}

func TestRunUsage(t *testing.T) {
	u := redisURL(shared)
	for _, args := range [][]string{
		{"run", "t-usage"},
		{"run", "t-usage", "--"},
		{"run"},
		{"run", "--wait", "-1s", "t-usage", "true"},
		{"run", "--watchdog", "1ms", "t-usage", "true"},
		{"run", "", "true"},
		{"inspect"},
		{"unlock", "--force"},
		{"unlock", "--force", "a", "b"},
		{"dashboard", "extra"},
		{"inspect", "--foo", "x"},
		{"frobnicate"},
		{"demo", "--servers", "0"},
		{"demo", "--requests", "-1"},
		{"demo", "--fair", "--no-lock"},
		{"bench", "-w", "0"},
		{"--no-such-flag"},
	} {
		r := dlockRun(t, nil, append([]string{"--redis", u}, args...)...)
		if r.code != exitUsage {
			t.Errorf("dlock %q: exit %d, want %d; stderr %s", args, r.code, exitUsage, r.stderr)
		}
		if !strings.HasPrefix(r.stderr, "dlock: ") || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("dlock %q: stderr %q", args, r.stderr)
		}
	}
}

func TestRedisErrors(t *testing.T) {
	r := dlockRun(t, nil, "--redis", "foo://nowhere", "inspect", "x")
	wantCode(t, r, exitUsage)
	if !strings.Contains(r.stderr, "bad Redis URL foo://nowhere") {
		t.Fatalf("stderr: %q", r.stderr)
	}
	// A closed port: unreachable, in one line, and the password is not shown.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{
		{"inspect", "x"}, {"unlock", "--force", "x"}, {"run", "x", "true"}, {"bench"}, {"demo"},
	} {
		r = dlockRun(t, nil, append([]string{"--redis", "redis://u:sekrit@" + addr}, args...)...)
		wantCode(t, r, exitUnavailable)
		oneLineErr(t, r, "cannot reach Redis at "+addr)
		if strings.Contains(r.stderr, "sekrit") {
			t.Fatalf("password in message: %q", r.stderr)
		}
	}
	// The environment variable is the default.
	r = dlockRun(t, []string{envRedisURL + "=redis://" + addr}, "inspect", "x")
	wantCode(t, r, exitUnavailable)
	r = dlockRun(t, []string{envRedisURL + "=" + redisURL(shared)}, "inspect", "x")
	wantCode(t, r, 0)
}

func decodeStrict(t *testing.T, data string, v any, keys ...string) {
	t.Helper()
	var raw any
	if err := json.Unmarshal([]byte(data), &raw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, data)
	}
	check := func(o any) {
		obj, ok := o.(map[string]any)
		if !ok {
			t.Fatalf("not an object: %v", o)
		}
		var got []string
		for k := range obj {
			got = append(got, k)
		}
		sort.Strings(got)
		want := append([]string(nil), keys...)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("keys %v, want %v", got, want)
		}
	}
	if arr, ok := raw.([]any); ok {
		for _, o := range arr {
			check(o)
		}
	} else {
		check(raw)
	}
	if err := json.Unmarshal([]byte(data), v); err != nil {
		t.Fatal(err)
	}
}

func TestInspect(t *testing.T) {
	c := newClient(t, shared)
	m := c.Mutex("t-inspect")
	ctx := ctxT(t)
	hctx, err := m.LockContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(hctx); err != nil { // re-entry along the hold's context: count 2
		t.Fatal(err)
	}
	// A waiter in another client, queued for the hand-off.
	c2 := newClient(t, shared)
	w := c2.Mutex("t-inspect")
	waited := make(chan error, 1)
	go func() {
		ok, err := w.TryLock(ctx, 20*time.Second, 0)
		if err == nil && !ok {
			err = fmt.Errorf("not acquired")
		}
		if err == nil {
			err = w.Unlock(ctx)
		}
		waited <- err
	}()
	rdb := shared.NewClient(t)
	for rdb.LLen(ctx, keys.For("t-inspect").Queue).Val() == 0 {
		time.Sleep(5 * time.Millisecond)
	}

	r := dlockRun(t, nil, "--redis", redisURL(shared), "inspect", "--json", "t-inspect", "t-inspect-free")
	wantCode(t, r, 0)
	var got []lockState
	decodeStrict(t, r.stdout, &got, "name", "locked", "kind", "mode", "holders", "ttl_ms", "token", "waiters", "waiting_writers")
	if len(got) != 2 {
		t.Fatalf("%d objects", len(got))
	}
	a, b := got[0], got[1]
	if a.Name != "t-inspect" || !a.Locked || a.Kind != "mutex" || len(a.Holders) != 1 || a.Holders[0].Owner != m.Owner() || a.Holders[0].Count != 2 {
		t.Fatalf("held lock: %+v (owner %s)", a, m.Owner())
	}
	// The holder is named by host and process: this test process's.
	host, _ := os.Hostname()
	if h := a.Holders[0]; h.PID != os.Getpid() || h.Host == "" || !strings.HasPrefix(host, h.Host) {
		t.Fatalf("holder host/pid %q/%d, want %q/%d", h.Host, h.PID, host, os.Getpid())
	}
	if a.TTLms <= 0 || a.TTLms > 30000 || a.Token != m.Token() || a.Token == 0 {
		t.Fatalf("ttl/token: %+v, token %d", a, m.Token())
	}
	if len(a.Waiters) != 1 || !strings.HasPrefix(a.Waiters[0].Owner, c2.ID()+":") || a.Waiters[0].Position != 1 || a.Waiters[0].PID != os.Getpid() {
		t.Fatalf("waiters: %+v, want one of client %s", a.Waiters, c2.ID())
	}
	if b.Name != "t-inspect-free" || b.Locked || b.Kind != "" || len(b.Holders) != 0 || b.TTLms != 0 || b.Token != 0 || len(b.Waiters) != 0 {
		t.Fatalf("free lock: %+v", b)
	}
	if !strings.Contains(r.stdout, `"holders": []`) {
		t.Fatalf("empty holders must be [] not null:\n%s", r.stdout)
	}

	r = dlockRun(t, nil, "--redis", redisURL(shared), "inspect", "t-inspect", "t-inspect-free")
	wantCode(t, r, 0)
	hp := fmt.Sprintf("%s pid %d", a.Holders[0].Host, os.Getpid())
	for _, want := range []string{"t-inspect: locked, expires in", "holder  " + hp + "  count 2  (owner " + m.Owner() + ")",
		"waiter  #1  " + hp + "  (owner " + a.Waiters[0].Owner + ")", "t-inspect-free: not locked"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("text output lacks %q:\n%s", want, r.stdout)
		}
	}

	_ = m.Unlock(ctx)
	_ = m.Unlock(ctx)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}

	// Not a lock.
	rdb.Set(ctx, "t-inspect-string", "x", time.Minute)
	r = dlockRun(t, nil, "--redis", redisURL(shared), "inspect", "t-inspect-string")
	wantCode(t, r, exitFailure)
	oneLineErr(t, r, "is not a lock: \"t-inspect-string\" is a Redis string")
}

func TestUnlock(t *testing.T) {
	c := newClient(t, shared, dlock.WithWatchdogTimeout(300*time.Millisecond))
	m := c.Mutex("t-unlock")
	if err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, nil, "--redis", redisURL(shared), "unlock", "t-unlock")
	wantCode(t, r, exitUsage)
	oneLineErr(t, r, "without --force")
	if locked, _ := m.IsLocked(ctxT(t)); !locked {
		t.Fatal("unlocked without --force")
	}

	r = dlockRun(t, nil, "--redis", redisURL(shared), "unlock", "--force", "t-unlock")
	wantCode(t, r, 0)
	if want := fmt.Sprintf("t-unlock was held by %s pid %d: released it; nobody was waiting\n", hostOf(t, m.Owner()), os.Getpid()); r.stdout != want {
		t.Fatalf("stdout %q, want %q", r.stdout, want)
	}
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder never learned it lost the lock")
	}
	if err := m.Unlock(ctxT(t)); err == nil {
		t.Fatal("Unlock after a forced unlock succeeded")
	}
	r = dlockRun(t, nil, "--redis", redisURL(shared), "unlock", "--force", "t-unlock")
	wantCode(t, r, 0)
	if r.stdout != "t-unlock was not held: nothing to do\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
}

var demoKeys = []string{"stock", "issued", "oversold", "requests", "rejected", "wait_p50_ms", "wait_p99_ms", "commands_per_issue"}

func checkDemo(t *testing.T, r result, noLock bool) demoJSON {
	t.Helper()
	wantCode(t, r, 0)
	if strings.Count(strings.TrimSpace(r.stdout), "\n") != 0 {
		t.Fatalf("want exactly one line of JSON:\n%s", r.stdout)
	}
	var d demoJSON
	decodeStrict(t, r.stdout, &d, demoKeys...)
	if d.Stock != 100 || d.Requests != 300 || d.CommandsPerIssue <= 0 {
		t.Fatalf("%+v", d)
	}
	if noLock {
		if d.Oversold <= 0 || d.Issued <= d.Stock {
			t.Fatalf("--no-lock did not oversell: %+v", d)
		}
	} else {
		if d.Oversold != 0 || d.Issued != 100 || d.Rejected != 200 || d.WaitP99ms < d.WaitP50ms || d.WaitP50ms <= 0 {
			t.Fatalf("with the lock: %+v", d)
		}
	}
	if r.stderr != "" {
		t.Fatalf("stderr not empty when not a terminal: %q", r.stderr)
	}
	return d
}

func TestDemoEmbedded(t *testing.T) {
	d := checkDemo(t, dlockRun(t, nil, "demo", "--json"), false)
	t.Logf("embedded, locked: %+v", d)
	d = checkDemo(t, dlockRun(t, nil, "demo", "--json", "--no-lock"), true)
	t.Logf("embedded, no lock: %+v", d)
	d = checkDemo(t, dlockRun(t, nil, "demo", "--json", "--fair"), false)
	t.Logf("embedded, fair lock: %+v", d)
	r := dlockRun(t, nil, "demo")
	wantCode(t, r, 0)
	for _, want := range []string{"embedded Redis (miniredis)", "oversold             0", "commands per issue"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("text lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestDemoRealRedis(t *testing.T) {
	rs := testenv.StartRedis(t)
	d := checkDemo(t, dlockRun(t, nil, "--redis", redisURL(rs), "demo", "--json"), false)
	t.Logf("redis-server, locked: %+v", d)
	d = checkDemo(t, dlockRun(t, nil, "--redis", redisURL(rs), "demo", "--json", "--no-lock"), true)
	t.Logf("redis-server, no lock: %+v", d)
	// From the environment too, and as text with the server's count.
	r := dlockRun(t, []string{envRedisURL + "=" + redisURL(rs)}, "demo", "--requests", "50", "--stock", "10")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "Redis at "+rs.Addr()) || !strings.Contains(r.stdout, "run by the server") {
		t.Fatalf("text:\n%s", r.stdout)
	}
	// It cleans up after itself: nothing is left but nothing at all.
	n, err := rs.Do(ctxT(t), "DBSIZE")
	if err != nil || n.(int64) != 0 {
		keys, _ := rs.Do(ctxT(t), "KEYS", "*")
		t.Fatalf("demo left keys behind: %v %v", keys, err)
	}
}

func TestDemoMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := cli(ctx, nil, "demo", "--json", "--requests", "1000", "--stock", "1000", "--metrics-addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	if !sc.Scan() {
		t.Fatal("no stderr line")
	}
	line := sc.Text()
	url, ok := strings.CutPrefix(line, "dlock: serving metrics on ")
	if !ok {
		t.Fatalf("stderr: %q", line)
	}
	var body string
	for i := 0; i < 100; i++ {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		if strings.Contains(body, `dlock_acquired_total{kind="mutex"}`) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(body, `dlock_acquired_total{kind="mutex"}`) || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics:\n%s", body)
	}
	_, _ = io.Copy(io.Discard, stderr)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("demo: %v", err)
	}
	var d demoJSON
	if err := json.Unmarshal(out.Bytes(), &d); err != nil || d.Issued != 1000 || d.Oversold != 0 {
		t.Fatalf("%v %+v", err, d)
	}
}

func TestBench(t *testing.T) {
	rs := testenv.StartRedis(t)
	r := dlockRun(t, nil, "--redis", redisURL(rs), "bench", "-w", "4", "-k", "10", "-l", "0", "--json")
	wantCode(t, r, 0)
	var res benchJSON
	decodeStrict(t, r.stdout, &res, "workers", "grants_per_worker", "hold_ms", "grants", "elapsed_ms",
		"grants_per_sec", "wait_p50_ms", "wait_p99_ms", "gap_p50_ms", "gap_p99_ms", "gaps",
		"commands_sent", "commands_per_grant", "server_commands", "server_commands_per_grant")
	if res.Workers != 4 || res.GrantsPerWorker != 10 || res.Grants != 40 || res.CommandsPerGrant < 2 ||
		res.ServerCommandsPerGrant < res.CommandsPerGrant || res.GrantsPerSec <= 0 || res.ElapsedMs <= 0 {
		t.Fatalf("%+v", res)
	}
	// Milliseconds, not nanoseconds: the run took less than a minute.
	if res.ElapsedMs > 60000 || res.WaitP99Ms > 60000 {
		t.Fatalf("durations not in ms: %+v", res)
	}
	r = dlockRun(t, nil, "--redis", redisURL(rs), "bench", "-w", "3", "-k", "5", "--hold", "1ms")
	wantCode(t, r, 0)
	for _, want := range []string{"grants/s", "wait p50", "gap p99", "cmds/grant", "no overlapping holders"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("table lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	r := dlockRun(t, nil, "version")
	wantCode(t, r, 0)
	if !strings.HasPrefix(r.stdout, "dlock ") {
		t.Fatalf("version: %q", r.stdout)
	}
	for _, sub := range []string{"", "demo", "run", "inspect", "unlock", "bench", "dashboard", "version"} {
		args := []string{"--help"}
		if sub != "" {
			args = []string{sub, "--help"}
		}
		r := dlockRun(t, nil, args...)
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "Examples:") {
			t.Errorf("dlock %s --help has no examples:\n%s", sub, r.stdout)
		}
	}
	r = dlockRun(t, nil, "run", "--help")
	for _, want := range []string{"--fair", "75", "76", "parent-death signal", "A second one escalates", "1 to 1024 bytes"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("run --help lacks %q:\n%s", want, r.stdout)
		}
	}
	r = dlockRun(t, nil, "--help")
	for _, want := range []string{"master_name=NAME", "?addr=host2:port", "A bare host:port", "69", "75", "76", "dashboard"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("--help lacks %q:\n%s", want, r.stdout)
		}
	}
	r = dlockRun(t, nil, "dashboard", "--help")
	for _, want := range []string{"for a lock TYPE, HGETALL, PTTL, GET, LRANGE and ZCARD (8 commands)", "4*N/1000 + H + 8*L + 7*S + 4*C", "never KEYS", "--allow-unlock", "CSRF"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("dashboard --help lacks %q:\n%s", want, r.stdout)
		}
	}
	r = dlockRun(t, nil, "bench", "--help")
	if !strings.Contains(r.stdout, `"wait_p50_ms"`) || !strings.Contains(r.stdout, "milliseconds") {
		t.Fatalf("bench --help does not document --json:\n%s", r.stdout)
	}
}

var _ = redis.Nil

// On a lost hold CMD gets SIGTERM first, and time to act on it before the
// SIGKILL that follows the grace period.
func TestRunLostSendsTERMFirst(t *testing.T) {
	c := newClient(t, shared)
	name := "t-lost-term-first"
	s := dlockStart(t, "--redis", redisURL(shared), "run", "--watchdog", "300ms", "--grace", "10s", name, "--",
		"sh", "-c", "trap 'echo got-term; kill $!; exit 0' TERM; echo ready; sleep 30 & wait")
	s.waitLine(t, "ready")
	if held, err := c.Mutex(name).ForceUnlock(ctxT(t)); err != nil || !held {
		t.Fatalf("ForceUnlock: %v %v", held, err)
	}
	s.waitLine(t, "got-term")
	if code := s.wait(t, 15*time.Second); code != exitLost {
		t.Fatalf("exit code %d, want %d; stderr: %s", code, exitLost, s.stderr)
	}
}

// hostOf is the host part of a default client id or owner.
func hostOf(t *testing.T, owner string) string {
	t.Helper()
	host, _, ok := dlock.ParseClientID(owner)
	if !ok {
		t.Fatalf("owner %q is not in the default form", owner)
	}
	return host
}

// A hold the watchdog has renewed shows, in inspect's text and JSON, how
// long it has been held and how often renewed.
func TestInspectLongHold(t *testing.T) {
	c := newClient(t, shared, dlock.WithWatchdogTimeout(300*time.Millisecond))
	m := c.Mutex("t-inspect-long")
	ctx := ctxT(t)
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Unlock(ctx) }()
	var got []lockState
	for deadline := time.Now().Add(5 * time.Second); ; {
		r := dlockRun(t, nil, "--redis", redisURL(shared), "inspect", "--json", "t-inspect-long")
		wantCode(t, r, 0)
		got = nil
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 1 || len(got[0].Holders) != 1 {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		if got[0].Holders[0].Renewals >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewals shown: %+v", got[0].Holders[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h := got[0].Holders[0]; h.HeldForMs < 150 {
		t.Fatalf("held for %dms after %d renewals 100ms apart", h.HeldForMs, h.Renewals)
	}
	r := dlockRun(t, nil, "--redis", redisURL(shared), "inspect", "t-inspect-long")
	wantCode(t, r, 0)
	if !regexp.MustCompile(`holder .* held for \S+, \d+ renewals`).MatchString(r.stdout) {
		t.Fatalf("inspect's text does not show the long hold:\n%s", r.stdout)
	}
}

// Every command works for a user whose ACL allows only the namespace's keys
// and channels and no @dangerous command, with the namespace from the flag
// or the environment, and the server's ACL LOG stays empty.
func TestCommandsUnderACL(t *testing.T) {
	r := testenv.StartRedis(t)
	admin := r.NewClient(t)
	ctx := ctxT(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "svc", "on", ">pw", "resetkeys", "~ns:*", "resetchannels", "&ns:*", "+@all", "-@dangerous").Err(); err != nil {
		t.Fatal(err)
	}
	admin.Do(ctx, "ACL", "LOG", "RESET")
	url := "redis://svc:pw@" + r.Addr()
	env := []string{"DLOCK_NAMESPACE=ns"}
	wantCode(t, dlockRun(t, nil, "--redis", url, "--namespace", "ns", "run", "job", "--", "true"), 0)
	wantCode(t, dlockRun(t, env, "--redis", url, "run", "job", "--", "true"), 0)
	wantCode(t, dlockRun(t, env, "--redis", url, "inspect", "job"), 0)
	all := dlockRun(t, env, "--redis", url, "inspect", "--all", "--history")
	wantCode(t, all, 0)
	// Names are shown without the namespace (job, released, is history).
	if !strings.Contains(all.stdout, "job") || strings.Contains(all.stdout, "ns:") {
		t.Fatalf("inspect --all under the namespace:\n%s", all.stdout)
	}
	wantCode(t, dlockRun(t, env, "--redis", url, "unlock", "--force", "job"), 0)
	wantCode(t, dlockRun(t, env, "--redis", url, "doctor"), 0)
	if n := admin.Exists(ctx, "job").Val(); n != 0 {
		t.Fatal("a lock outside the namespace")
	}
	if log, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
		t.Fatalf("ACL LOG = %v, %v; want nothing denied", log, err)
	}
	wantCode(t, dlockRun(t, nil, "--redis", url, "--namespace", "a b", "inspect", "job"), 2)
	// A namespace that would run as Lua, or nest in another, is refused
	// before any network call, from the flag and from the environment.
	for _, ns := range []string{"x'..redis.call('set','pwned','1').ok..'", `y\`, "ns:b"} {
		wantCode(t, dlockRun(t, nil, "--redis", url, "--namespace", ns, "unlock", "--force", "job"), 2)
		wantCode(t, dlockRun(t, []string{"DLOCK_NAMESPACE=" + ns}, "--redis", url, "unlock", "--force", "job"), 2)
	}
	if n := admin.Exists(ctx, "pwned").Val(); n != 0 {
		t.Fatal("the namespace ran as Lua")
	}
}
