package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// A "--" before any NAME is a usage error: "echo" is not taken as the lock
// name, nothing is locked and nothing runs.
func TestRunDashWithoutName(t *testing.T) {
	u := redisURL(shared)
	for _, args := range [][]string{
		{"run", "--", "echo", "hi"},
		{"run", "--wait", "1s", "--", "echo", "hi"},
	} {
		r := dlockRun(t, nil, append([]string{"--redis", u}, args...)...)
		wantCode(t, r, exitUsage)
		if !strings.Contains(r.stderr, "run needs a lock NAME before --") || r.stdout != "" {
			t.Fatalf("dlock %q: stdout %q stderr %q", args, r.stdout, r.stderr)
		}
	}
	if n, err := shared.Do(ctxT(t), "EXISTS", "echo"); err != nil || n.(int64) != 0 {
		t.Fatalf("took %q as a lock: %v %v", "echo", n, err)
	}
}

// host:port, localhost:port and a bare Unix socket path are accepted as
// redis:// URLs; a URL that does not parse gets the hint.
func TestRedisShortForms(t *testing.T) {
	port := strconv.Itoa(shared.Port())
	for _, addr := range []string{"127.0.0.1:" + port, "localhost:" + port, " 127.0.0.1:" + port + " "} {
		r := dlockRun(t, nil, "--redis", addr, "inspect", "t-short-form")
		wantCode(t, r, 0)
		if !strings.Contains(r.stdout, "t-short-form: not locked") {
			t.Fatalf("--redis %q: %q", addr, r.stdout)
		}
	}
	r := dlockRun(t, []string{envRedisURL + "=127.0.0.1:" + port}, "inspect", "t-short-form")
	wantCode(t, r, 0)
	r = dlockRun(t, nil, "--redis", "foo://nowhere:1", "inspect", "x")
	wantCode(t, r, exitUsage)
	usageErr(t, r, "want redis://host:port")
	r = dlockRun(t, nil, "--redis", "", "inspect", "x")
	wantCode(t, r, exitUsage)
	usageErr(t, r, "--redis is empty")
}

// Through Sentinel (master_name) the CLI locks the master's lock: it sees
// the library's hold, and its own hold excludes the library.
func TestSentinel(t *testing.T) {
	master := testenv.StartRedis(t)
	s := testenv.StartSentinel(t, master)
	u := "redis://" + s.Addr() + "?master_name=" + testenv.MasterName
	c := newClient(t, master)
	m := c.Mutex("t-sentinel")
	if err := m.Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, nil, "--redis", u, "run", "--wait", "0", "t-sentinel", "--", "echo", "ran")
	wantCode(t, r, exitNotAcquired)
	if err := m.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// While the CLI holds it through Sentinel, the library cannot take it.
	st := dlockStart(t, "--redis", u, "run", "t-sentinel", "--", "sh", "-c", "echo ready; exec sleep 30")
	st.waitLine(t, "ready")
	if ok, err := m.TryLock(ctxT(t), 0, 0); ok || err != nil {
		t.Fatalf("TryLock while dlock run holds it via Sentinel: %v %v", ok, err)
	}
	r = dlockRun(t, nil, "--redis", u, "inspect", "--json", "t-sentinel")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"locked": true`) {
		t.Fatalf("inspect via Sentinel: %s", r.stdout)
	}
	_ = st.cmd.Process.Signal(syscall.SIGTERM)
	st.wait(t, 10*time.Second)
	// A wrong master name is "unreachable", in one line.
	r = dlockRun(t, nil, "--redis", "redis://"+s.Addr()+"?master_name=nosuch", "inspect", "x")
	wantCode(t, r, exitUnavailable)
	oneLineErr(t, r, `master "nosuch" via Sentinel`)
	// bench and demo need one server.
	r = dlockRun(t, nil, "--redis", u, "bench")
	wantCode(t, r, exitUsage)
	usageErr(t, r, "bench runs against one Redis server")
}

// Against a Redis Cluster the CLI works from one node's plain URL (the node
// is recognised as a cluster node) and from the ?addr= seed list, for names
// in every node's slots.
func TestCluster(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	addrs := cl.Addrs()
	lib, err := dlock.New(cl.NewClient(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lib.Close() })
	urls := []string{
		"redis://" + addrs[0],
		"redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2],
		addrs[2], // host:port of a node
	}
	// One name per node.
	names := map[*testenv.Redis]string{}
	for i := 0; len(names) < len(addrs); i++ {
		n := fmt.Sprintf("t-cluster-%d", i)
		node := cl.SlotNode(slotOf(n))
		if _, ok := names[node]; !ok {
			names[node] = n
		}
	}
	held := map[string]*dlock.Mutex{}
	for _, name := range names {
		held[name] = lib.Mutex(name)
		if err := held[name].Lock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	// The dashboard scans every master: it shows each node's lock.
	_, base := dashboardAt(t, urls[0])
	shown := map[string]bool{}
	for _, l := range snapshotOf(t, base).Locks {
		shown[l.Name] = l.Locked && len(l.Holders) == 1 && l.Holders[0].Owner == held[l.Name].Owner()
	}
	for _, name := range names {
		if !shown[name] {
			t.Fatalf("dashboard on the Cluster does not show %s held: %v", name, shown)
		}
	}
	for _, name := range names {
		m := held[name]
		for _, u := range urls {
			r := dlockRun(t, nil, "--redis", u, "run", "--wait", "0", name, "--", "echo", "ran")
			wantCode(t, r, exitNotAcquired)
			r = dlockRun(t, nil, "--redis", u, "inspect", "--json", name)
			wantCode(t, r, 0)
			if !strings.Contains(r.stdout, m.Owner()) {
				t.Fatalf("--redis %s inspect %s: %s", u, name, r.stdout)
			}
		}
		if err := m.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		wantCode(t, dlockRun(t, nil, "--redis", urls[1], "run", name, "--", "sh", "-c", "exit 3"), 3)
	}
	// A database number is refused for a cluster.
	r := dlockRun(t, nil, "--redis", "redis://"+addrs[0]+"/2", "inspect", "x")
	wantCode(t, r, exitUnavailable)
	oneLineErr(t, r, "only database 0")
}

// slotOf is Redis Cluster's hash slot of key.
func slotOf(key string) int { return int(keys.Slot(key)) }

// procState returns the state letter of pid from /proc ("" once it is gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// alive reports whether pid runs (a zombie is dead).
func alive(pid int) bool {
	st := procState(pid)
	return st != "" && st != "Z" && st != "X"
}

// SIGKILL to dlock run kills CMD too (the parent-death signal), so CMD
// never runs on unlocked once the TTL ends.
func TestRunChildDiesWithDlock(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs Linux /proc")
	}
	s := dlockStart(t, "--redis", redisURL(shared), "run", "t-pdeath", "--", "sh", "-c", "echo pid $$; exec sleep 40")
	var pid int
	select {
	case l := <-s.lines:
		if _, err := fmt.Sscanf(l, "pid %d", &pid); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("CMD never started")
	}
	if !alive(pid) {
		t.Fatalf("CMD %d not running", pid)
	}
	// CMD is the leader of a process group of its own.
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Fatalf("CMD's process group %d (%v), want its own %d", pgid, err, pid)
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.wait(t, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("CMD %d still running 10s after dlock was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A CMD that ignores SIGINT: the first Ctrl-C is passed on and ignored, the
// second escalates to SIGTERM, and SIGKILL follows after --grace when CMD
// ignores SIGTERM too. The lock is released.
func TestRunSecondSignalEscalates(t *testing.T) {
	for _, tc := range []struct {
		name, traps string
		code        int
	}{
		{"term", "trap '' INT", 128 + int(syscall.SIGTERM)},
		{"kill-after-grace", "trap '' INT TERM", 128 + int(syscall.SIGKILL)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "t-escalate-" + tc.name
			s := dlockStart(t, "--redis", redisURL(shared), "run", "--grace", "300ms", name, "--",
				"sh", "-c", tc.traps+"; echo ready; exec sleep 40")
			s.waitLine(t, "ready")
			if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			// The first one is passed on (and ignored): dlock says so and
			// CMD keeps running.
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(s.stderrText(), "passed interrupt") {
				if time.Now().After(deadline) {
					t.Fatalf("no notice of the first signal; stderr: %s", s.stderrText())
				}
				time.Sleep(10 * time.Millisecond)
			}
			select {
			case <-s.done:
				t.Fatalf("dlock exited after one SIGINT; stderr: %s", s.stderrText())
			default:
			}
			if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			if code := s.wait(t, 10*time.Second); code != tc.code {
				t.Fatalf("exit code %d, want %d; stderr: %s", code, tc.code, s.stderrText())
			}
			if !strings.Contains(s.stderrText(), "second signal: sending SIGTERM") {
				t.Fatalf("stderr: %s", s.stderrText())
			}
			if n, err := shared.Do(ctxT(t), "EXISTS", name); err != nil || n.(int64) != 0 {
				t.Fatalf("lock not released: %v %v", n, err)
			}
		})
	}
}

// Bad flags and arguments name the flag (or NAME) in one line.
func TestBadFlagsAreNamed(t *testing.T) {
	u := redisURL(shared)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--wait", "-5s", "t-flag", "true"}, "--wait must not be negative, got -5s"},
		{[]string{"run", "--lease", "-1s", "t-flag", "true"}, "--lease must not be negative"},
		{[]string{"run", "--grace", "-1s", "t-flag", "true"}, "--grace must not be negative"},
		{[]string{"run", "--watchdog", "1ms", "t-flag", "true"}, "--watchdog must be at least"},
		{[]string{"run", "--wait", "5", "t-flag", "true"}, `"--wait"`},
		{[]string{"demo", "--workers", "0"}, "--workers must be 1 to 10000, got 0"},
		{[]string{"demo", "--servers", "0"}, "--servers must be 1 to 1000, got 0"},
		{[]string{"demo", "--stock", "0"}, "--stock must be at least 1, got 0"},
		{[]string{"demo", "--requests", "-1"}, "--requests must be at least 1"},
		{[]string{"demo", "--think", "-1ms"}, "--think must not be negative"},
		{[]string{"demo", "--fair", "--no-lock"}, "--fair and --no-lock"},
		{[]string{"bench", "-w", "0"}, "--workers (-w) must be at least 1, got 0"},
		{[]string{"bench", "-k", "0"}, "--grants (-k) must be at least 1"},
		{[]string{"bench", "-l", "-1ms"}, "--hold (-l) must not be negative"},
		{[]string{"run", "", "true"}, "NAME is empty"},
		{[]string{"unlock", "--force", "dlock:fence:{acct}"}, `begins with "dlock:"`},
		{[]string{"inspect", "a\x1b]0;pwned\x07"}, `"a\x1b]0;pwned\a" holds a control character`},
		{[]string{"dashboard", "--interval", "1ms"}, "--interval must be at least"},
		{[]string{"dashboard", "--max-locks", "0"}, "--max-locks must be 1 to"},
		{[]string{"dashboard", "--metrics", "not a url"}, "--metrics"},
		{[]string{"dashboard", "--listen", "nowhere"}, "--listen"},
	} {
		r := dlockRun(t, nil, append([]string{"--redis", u}, tc.args...)...)
		wantCode(t, r, exitUsage)
		first := strings.SplitN(r.stderr, "\n", 2)[0]
		if !strings.HasPrefix(first, "dlock: ") || !strings.Contains(first, tc.want) {
			t.Errorf("dlock %q: stderr %q, want %q", tc.args, r.stderr, tc.want)
		}
	}
}

// A 10,000-byte name is refused before any network call, in a short line
// that states the limit; the limit is in --help.
func TestHugeName(t *testing.T) {
	huge := strings.Repeat("x", 10000)
	for _, args := range [][]string{
		{"inspect", huge},
		{"unlock", "--force", huge},
		{"run", huge, "true"},
		{"bench", "--name", huge},
		{"run", strings.Repeat("}", 2000), "true"},
	} {
		// A Redis that does not exist: the name is checked first.
		r := dlockRun(t, nil, append([]string{"--redis", "redis://127.0.0.1:1"}, args...)...)
		wantCode(t, r, exitUsage)
		if len(r.stderr) > 300 || strings.Count(r.stderr, "\n") != 2 {
			t.Fatalf("dlock %s: %d-byte stderr: %q", args[0], len(r.stderr), r.stderr)
		}
		if args[0] != "run" || !strings.HasPrefix(args[1], "}") {
			if !strings.Contains(r.stderr, "limit is 1024") {
				t.Fatalf("stderr %q", r.stderr)
			}
		}
	}
	r := dlockRun(t, nil, "--help")
	if !strings.Contains(r.stdout, "1 to 1024 bytes") {
		t.Fatalf("--help does not state the name limit:\n%s", r.stdout)
	}
}

// Any message is one line of bounded length, even one from Redis that
// quotes a long name.
func TestLongMessagesAreCut(t *testing.T) {
	long := strings.Repeat("n", 1000)
	if err := shared.NewClient(t).Set(ctxT(t), long, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, nil, "--redis", redisURL(shared), "inspect", long)
	wantCode(t, r, exitFailure)
	if len(r.stderr) > maxMessage+40 || !strings.Contains(r.stderr, "not a dlock lock") && !strings.Contains(r.stderr, "bytes)") {
		t.Fatalf("%d bytes: %q", len(r.stderr), r.stderr)
	}
}

func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := dlockRun(t, nil, args...)
		wantCode(t, r, 0)
		if !strings.HasPrefix(r.stdout, "dlock ") || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
			t.Fatalf("dlock %s: %q %q", args[0], r.stdout, r.stderr)
		}
	}
}

// unlock --force says what happened: handed to the queued waiter (named by
// host and pid), or released with nobody waiting (TestUnlock), or nothing
// held.
func TestUnlockHandsToWaiter(t *testing.T) {
	c := newClient(t, shared, dlock.WithWatchdogTimeout(time.Second))
	m := c.Mutex("t-unlock-handoff")
	ctx := ctxT(t)
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := newClient(t, shared)
	w := c2.Mutex("t-unlock-handoff")
	got := make(chan error, 1)
	go func() {
		ok, err := w.TryLock(ctx, 20*time.Second, 0)
		if err == nil && !ok {
			err = fmt.Errorf("not acquired")
		}
		got <- err
	}()
	rdb := shared.NewClient(t)
	for rdb.LLen(ctx, keys.For("t-unlock-handoff").Queue).Val() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	r := dlockRun(t, nil, "--redis", redisURL(shared), "unlock", "--force", "t-unlock-handoff")
	wantCode(t, r, 0)
	hp := fmt.Sprintf("%s pid %d", hostOf(t, m.Owner()), os.Getpid())
	want := "t-unlock-handoff was held by " + hp + ": released it; handed it to the next waiter, now held by " + hp + "\n"
	if r.stdout != want {
		t.Fatalf("stdout %q\nwant   %q", r.stdout, want)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}
