//go:build unix

package dlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// A paused holder process (issue 17 part 6): a holder in a child process
// (this test binary, re-executed in a helper mode) takes a lock and writes to
// the resource, then is frozen with SIGSTOP for three watchdogs, as a long GC
// pause, a VM migration or a debugger would. Meanwhile its TTL runs out and a
// Client of the test process is granted the lock and writes with its higher
// token. Then the child gets SIGCONT and, not knowing it was frozen, carries
// on: it checks its hold's context and makes its next write anyway.
//
// The resource lives in the test process: the child sends each write (with
// its token, and whether its context was already cancelled) over its stdout
// and reads the resource's verdict on its stdin.
//
// What is guaranteed: the child's late write is rejected (its token is lower
// than the new holder's), so no overlap is accepted; and the child is told
// (its context cancelled with ErrLockLost) soon after it runs again. Whether
// it is told before its next write is a race between its own timers once it
// resumes (the hold's local deadline and the write loop's sleep both expired
// during the pause): the scenario reports it, it does not assert it.

// pausedChildEnv selects the helper mode: it holds the Redis address.
const (
	pausedChildEnv      = "DLOCK_FAULT_PAUSED_CHILD"
	pausedChildNameEnv  = "DLOCK_FAULT_PAUSED_NAME"
	pausedWatchdog      = 600 * time.Millisecond
	pausedChildInterval = 20 * time.Millisecond
)

func init() {
	// In helper mode the binary is the paused holder, not a test run: it
	// exits before TestMain.
	if addr := os.Getenv(pausedChildEnv); addr != "" {
		os.Exit(pausedChild(addr, os.Getenv(pausedChildNameEnv)))
	}
}

// pausedChild is the child's side. Lines out: "granted <token>", then
// "write <unix ns> <told>" answered by "ok" or "rejected" on stdin, until a
// write made when told or rejected; then "told <unix ns> <reason>" (0 and
// "none" if not told within 5s), "unlock <reason or nil>" and "done".
func pausedChild(addr, name string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "paused child:", err)
		return 2
	}
	rdb := redis.NewClient(rdbOptions(addr))
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithWatchdogTimeout(pausedWatchdog), dlock.WithCloseTimeout(time.Second))
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	m := c.Mutex(name)
	lockCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx, err := m.LockContext(lockCtx)
	if err != nil {
		return fail(err)
	}
	var toldAt time.Time
	told := make(chan struct{})
	go func() {
		<-ctx.Done()
		toldAt = time.Now()
		close(told)
	}()
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	in := bufio.NewScanner(os.Stdin)
	say("granted %d", m.Token())
	for {
		time.Sleep(pausedChildInterval)
		// The protected write, as a careful holder makes it: context checked
		// first. It is sent even when the context is done, to show what
		// fencing makes of it.
		wasTold := ctx.Err() != nil
		say("write %d %v", time.Now().UnixNano(), wasTold)
		if !in.Scan() {
			return fail(errors.New("stdin closed"))
		}
		if wasTold || in.Text() != "ok" {
			break
		}
	}
	select {
	case <-told:
		say("told %d %s", toldAt.UnixNano(), lossKind(context.Cause(ctx)))
	case <-time.After(5 * time.Second):
		say("told 0 none")
	}
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ucancel()
	if err := m.Unlock(uctx); err != nil {
		say("unlock %s", lossKind(err))
	} else {
		say("unlock nil")
	}
	say("done")
	return 0
}

// pausedRound is one child's story, as the test process saw it.
type pausedRound struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
	v     *visit // the child's stay in the resource

	writes    chan struct{} // one per write accepted before the pause
	finished  chan error    // the child's protocol ended (nil: "done")
	lateTold  bool          // its first write sent after SIGCONT was made told
	lateOK    bool          // ... and the resource accepted it
	lateSeen  bool
	toldAt    time.Time // zero: not told
	toldBy    string
	unlockErr string
}

// serve applies the child's writes to the resource until "done".
func (p *pausedRound) serve(s *scenario, cont func() time.Time) {
	err := func() error {
		for p.lines.Scan() {
			f := strings.Fields(p.lines.Text())
			switch {
			case len(f) == 2 && f[0] == "granted":
				tok, err := strconv.ParseUint(f[1], 10, 64)
				if err != nil {
					return err
				}
				p.v = s.res.enterName(p.name, "child "+p.name, tok, false)
			case len(f) == 3 && f[0] == "write" && p.v != nil:
				if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
					return err
				}
				ok := writeVisit(s.res, p.v)
				// The late write is the first to reach the resource after
				// SIGCONT. Its timestamp may predate SIGSTOP: a child stopped
				// between reading the clock and sending the line sends it on
				// waking, with what it knew before the pause.
				if c := cont(); !c.IsZero() && !time.Now().Before(c) && !p.lateSeen {
					p.lateSeen, p.lateTold, p.lateOK = true, f[2] == "true", ok
				} else if ok {
					select {
					case p.writes <- struct{}{}:
					default:
					}
				}
				reply := "ok\n"
				if !ok {
					reply = "rejected\n"
				}
				if _, err := io.WriteString(p.stdin, reply); err != nil {
					return err
				}
			case len(f) == 3 && f[0] == "told":
				ns, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil {
					return err
				}
				if ns > 0 {
					p.toldAt, p.toldBy = time.Unix(0, ns), f[2]
					s.res.tell(p.v, p.toldAt, errors.New(f[2]))
				}
			case len(f) == 2 && f[0] == "unlock":
				p.unlockErr = f[1]
			case len(f) == 1 && f[0] == "done":
				return nil
			default:
				return fmt.Errorf("unexpected line %q", p.lines.Text())
			}
		}
		if err := p.lines.Err(); err != nil {
			return err
		}
		return io.ErrUnexpectedEOF
	}()
	if p.v != nil {
		s.res.leave(p.v)
	}
	p.finished <- err
}

// writeVisit is one write of v's holder in the middle of its stay.
func writeVisit(r *fencedResource, v *visit) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writeLocked(v, time.Now())
}

func TestFaultPausedHolder(t *testing.T) {
	const rounds = 5
	const pause = 3 * pausedWatchdog
	r := testenv.StartRedis(t)
	s := newScenario(t, "paused holder process", r)
	parent := s.client(r.Addr(), dlock.WithWatchdogTimeout(pausedWatchdog), dlock.WithCloseTimeout(time.Second))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	var contMu sync.Mutex
	var contAt time.Time
	cont := func() time.Time { contMu.Lock(); defer contMu.Unlock(); return contAt }

	var ps []*pausedRound
	for i := range rounds {
		p := &pausedRound{name: fmt.Sprintf("paused:%d", i), writes: make(chan struct{}, 1), finished: make(chan error, 1)}
		p.cmd = exec.Command(exe, "-test.run=^$")
		p.cmd.Env = append(os.Environ(), pausedChildEnv+"="+r.Addr(), pausedChildNameEnv+"="+p.name)
		var stderr strings.Builder
		p.cmd.Stderr = &stderr
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.lines = bufio.NewScanner(stdout)
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill() // SIGKILL ends a stopped process too
			_ = p.cmd.Wait()
			if t.Failed() && stderr.Len() > 0 {
				t.Logf("child %s stderr:\n%s", p.name, stderr.String())
			}
		})
		go p.serve(s, cont)
		ps = append(ps, p)
	}
	// Each child granted and writing.
	for _, p := range ps {
		for range 2 {
			select {
			case <-p.writes:
			case err := <-p.finished:
				t.Fatalf("child %s ended early: %v", p.name, err)
			case <-time.After(30 * time.Second):
				t.Fatalf("child %s: no write within 30s", p.name)
			}
		}
	}

	for _, p := range ps {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	stopAt := time.Now()
	s.fault("SIGSTOP")

	// The test process's holders: granted once the children's TTLs ran out.
	type parentHold struct {
		m   *dlock.Mutex
		v   *visit
		err error
	}
	holds := make([]parentHold, rounds)
	var granted sync.WaitGroup
	for i, p := range ps {
		granted.Add(1)
		go func() {
			defer granted.Done()
			m := parent.Mutex(p.name)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := m.Lock(ctx); err != nil {
				holds[i].err = err
				return
			}
			holds[i].m = m
			holds[i].v = s.res.enterName(p.name, "parent "+p.name, m.Token(), false)
		}()
	}
	granted.Wait()
	for i, h := range holds {
		if h.err != nil {
			t.Fatalf("the test process's Lock of %s: %v", ps[i].name, h.err)
		}
	}
	grantedIn := time.Since(stopAt)
	if d := pause - time.Since(stopAt); d > 0 {
		time.Sleep(d)
	}
	pausedFor := time.Since(stopAt)

	contMu.Lock()
	contAt = time.Now()
	contMu.Unlock()
	s.fault("SIGCONT")
	for _, p := range ps {
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		select {
		case err := <-p.finished:
			if err != nil {
				t.Errorf("child %s: %v", p.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("child %s: not done within 30s of SIGCONT", p.name)
		}
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("child %s: %v", p.name, err)
		}
	}
	// The test process's holders write once more and release: their hold
	// was never in doubt.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, h := range holds {
		s.res.leave(h.v)
		if err := h.m.Unlock(ctx); err != nil {
			t.Errorf("the test process's Unlock of %s: %v", ps[i].name, err)
		}
	}
	leaks := s.shutdown()

	row, st := s.row(fmt.Sprintf("%d child processes, each holding its own lock (watchdog %v), frozen with SIGSTOP for %v; the test process granted each lock meanwhile, then SIGCONT", rounds, pausedWatchdog, pause), leaks)
	toldFirst, lateRejected := 0, 0
	var delays []time.Duration
	kinds := map[string]int{}
	for i, p := range ps {
		if !p.lateSeen {
			t.Errorf("child %s: no write after SIGCONT reached the resource", p.name)
			continue
		}
		if p.lateTold {
			toldFirst++
		}
		if !p.lateOK {
			lateRejected++
		} else {
			t.Errorf("child %s: its first write after SIGCONT was accepted (token %d) after the test process wrote with token %d", p.name, p.v.token, holds[i].v.token)
		}
		if p.toldAt.IsZero() {
			t.Errorf("child %s: not told of its loss within 5s of running again", p.name)
			continue
		}
		kinds[p.toldBy]++
		delays = append(delays, p.toldAt.Sub(contAt))
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] > delays[j] })
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ks)
	var unlocks []string
	for _, p := range ps {
		unlocks = append(unlocks, p.unlockErr)
	}
	row.Signal = -1
	if len(delays) > 0 {
		row.Signal = delays[0]
	}
	row.Notes = fmt.Sprintf("%d of %d children told before their first write after SIGCONT; that write rejected by fencing for %d of %d; SIGCONT → told %s (largest %s), by %s; the child's Unlock returned: %s; the test process was granted within %v of SIGSTOP, the children stayed frozen %v",
		toldFirst, rounds, lateRejected, rounds, durations(delays), formatDuration(row.Signal), strings.Join(ks, ", "), strings.Join(unlocks, ", "),
		grantedIn.Round(10*time.Millisecond), pausedFor.Round(10*time.Millisecond))
	record(t, row)
	s.assertFenced(st)
}

// durations lists ds smallest first, rounded to 0.1 ms.
func durations(ds []time.Duration) string {
	var out []string
	for i := len(ds) - 1; i >= 0; i-- {
		out = append(out, formatDuration(ds[i]))
	}
	return strings.Join(out, ", ")
}
