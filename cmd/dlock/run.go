package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/keys"
)

type runFlags struct {
	wait, lease, grace, watchdog time.Duration
	fair                         bool
}

// heldLock is what run needs of a lock handle: *dlock.Mutex and
// *dlock.FairMutex both have it.
type heldLock interface {
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	Unlock(ctx context.Context) error
	Done() <-chan struct{}
	Err() error
}

func (a *app) runCommand() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [--wait D] [--lease D] [--grace D] [--fair] NAME -- CMD [ARGS...]",
		Short: "Hold a lock while a command runs (flock across machines)",
		Long: `run takes the lock NAME, runs CMD while holding it, and releases it when CMD
exits. Without --lease the lock is held in watchdog mode: its TTL (30s) is
renewed every 10s for as long as CMD runs (see --watchdog), and it expires by
itself if this process dies.

CMD cannot outlive dlock: on Linux it runs in a process group of its own and
gets SIGKILL from the kernel if dlock dies, even by SIGKILL (the
parent-death signal), so it never runs on after the lock has expired. (Its
own children are not covered by that signal; the signals below reach the
whole group.) Because CMD is not in the terminal's foreground group, a CMD
that reads the terminal is stopped: run is for jobs, give them input by
redirection.

Signals: the first SIGINT, SIGTERM or SIGHUP that dlock receives (Ctrl-C in
a terminal) is passed to CMD's process group. A second one escalates: CMD's
group gets SIGTERM, then SIGKILL after --grace; a third sends SIGKILL at
once. dlock still releases the lock and exits with CMD's code.

If the lock is lost while CMD runs (someone ran "dlock unlock --force", Redis
lost the key, renewal failed for a whole TTL, or the --lease ran out), dlock
says why, CMD gets SIGTERM, then SIGKILL after --grace, and dlock exits 76.

Every phase is bounded, and what ends one is said on stderr:
  - the PING that checks Redis: up to ` + pingTimeout.String() + `;
  - the lock: up to --wait; a Redis that does not answer meanwhile ends
    the wait with exit 69 (within --wait and a second);
  - CMD: as long as it runs, or until --lease runs out; a Redis that stops
    answering costs the lock within --watchdog;
  - a lost lock: SIGTERM to CMD's group at once, SIGKILL --grace later to
    what of the group still runs, even once CMD itself has exited;
  - after CMD: the release waits up to ` + releaseTimeout.String() + ` for Redis (announced after
    ` + releaseNotice.String() + `), then closing takes up to ` + closeTimeout.String() + `: dlock exits at most
    ` + (releaseTimeout + closeTimeout).String() + ` after CMD does. A lock it could not release expires by its
    TTL in Redis (at most --watchdog, or --lease); a signal meanwhile gives
    up the release at once.

--fair takes the lock as a fair lock (dlock's FairMutex, Redisson's
RFairLock): waiters are served in the order they arrived, across machines, and
a newcomer never overtakes a queued waiter. Use it consistently: a fair and a
plain waiter on one name share the lock but not the ordering guarantee.

Flags go before NAME: everything after NAME belongs to CMD, with or without
"--". NAME is 1 to ` + strconv.Itoa(keys.MaxNameLen) + ` bytes.

Exit codes:
  CMD's own     CMD ran and exited (128+N if it was killed by signal N)
  75            NAME was not acquired within --wait
  76            the lock was lost while CMD ran
  2             bad flags or arguments (no NAME, no CMD, a negative duration)
  69            Redis could not be reached, or did not answer while dlock
                waited for NAME (or said LOADING, BUSY, MASTERDOWN, ...)
  77            Redis refused: a wrong password (WRONGPASS), none given
                (NOAUTH), an ACL denial (NOPERM); its reply is quoted
  126, 127      CMD could not be run / was not found
  128+N         dlock was interrupted by signal N while waiting
  1             any other failure`,
		Example: `  # Run the nightly report on one machine only; the others wait up to 10s, then exit 75:
  dlock run nightly-report -- ./report.sh --date today

  # Give up at once if another machine has it, hold it at most 10 minutes:
  dlock run --wait 0 --lease 10m migrate -- ./migrate up

  # Queue up in arrival order across machines:
  dlock run --fair --wait 5m deploy -- ./deploy.sh

  # In cron, skip quietly when another node is already running the job:
  dlock run --wait 0 cleanup -- ./cleanup.sh || [ $? -eq 75 ]`,
		Args: wrapArgs(func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() == 0 {
				return errors.New("run needs a lock NAME before --, as in: dlock run NAME -- CMD [ARGS...]")
			}
			if len(args) < 2 {
				return errors.New("run needs a lock NAME and a CMD, as in: dlock run NAME -- CMD [ARGS...]")
			}
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return fmt.Errorf("run takes one lock NAME before --, got %d", dash)
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, d := range []struct {
				flag string
				v    time.Duration
			}{{"--wait", f.wait}, {"--lease", f.lease}, {"--grace", f.grace}} {
				if d.v < 0 {
					return usagef("%s must not be negative, got %v", d.flag, d.v)
				}
			}
			if f.lease > 0 && f.lease < time.Millisecond {
				return usagef("--lease must be 0 (watchdog mode) or at least 1ms, Redis' resolution, got %v", f.lease)
			}
			if f.watchdog < dlock.MinWatchdogTimeout {
				return usagef("--watchdog must be at least %v, got %v", dlock.MinWatchdogTimeout, f.watchdog)
			}
			if err := checkName("NAME", args[0]); err != nil {
				return err
			}
			argv := args[1:]
			if argv[0] == "--" { // flags stop at NAME, so a "--" after it is kept
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return usagef("run needs a CMD after --")
			}
			return a.run(cmd.Context(), f, args[0], argv)
		},
	}
	// Flags stop at NAME: everything after it belongs to CMD, "--" or not.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().DurationVar(&f.wait, "wait", dlock.DefaultWaitTime, "how long to wait for the lock; 0 makes one attempt")
	cmd.Flags().DurationVar(&f.lease, "lease", 0, "hold the lock for at most this long, not renewed (0: watchdog mode, renewed while CMD runs)")
	cmd.Flags().DurationVar(&f.grace, "grace", 10*time.Second, "after a lost lock, time between SIGTERM and SIGKILL to CMD")
	cmd.Flags().DurationVar(&f.watchdog, "watchdog", 30*time.Second, "the lock's TTL in watchdog mode, renewed every third of it; a lost lock is noticed within a third")
	cmd.Flags().BoolVar(&f.fair, "fair", false, "take the lock in arrival order across processes (FairMutex)")
	return cmd
}

func signalCode(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitFailure
}

func (a *app) run(ctx context.Context, f runFlags, name string, argv []string) error {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	rdb, t, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	opts := append(a.clientOptions(), dlock.WithWatchdogTimeout(f.watchdog), dlock.WithCloseTimeout(closeTimeout))
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	var m heldLock = c.Mutex(name)
	if f.fair {
		m = c.FairMutex(name)
	}
	// What becomes of a lock left in Redis, for the messages.
	ttl := fmt.Sprintf("at most --watchdog, %v", f.watchdog)
	if f.lease > 0 {
		ttl = fmt.Sprintf("at most --lease, %v", f.lease)
	}

	// Wait for the lock; a signal meanwhile gives up.
	wctx, cancel := context.WithCancel(ctx)
	waitDone := make(chan struct{})
	gotSignal := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sigs:
			gotSignal <- s
			cancel()
		case <-waitDone:
			gotSignal <- nil
		}
	}()
	ok, err := m.TryLock(wctx, f.wait, f.lease)
	close(waitDone)
	interrupted := <-gotSignal
	cancel()
	if interrupted != nil {
		if ok {
			_ = a.release(ctx, m, name, fmt.Sprintf("interrupted by %v", interrupted), ttl, sigs)
		}
		return exitf(signalCode(interrupted), "interrupted by %v while waiting for %s", interrupted, shortName(name))
	}
	switch {
	case errors.Is(err, dlock.ErrUnavailable):
		return exitf(exitUnavailable, "no answer from Redis at %s to the lock call for %s (--wait %v)", t.where(), shortName(name), f.wait)
	case errors.Is(err, dlock.ErrInvalidArgument):
		return usagef("acquiring %s: %v", shortName(name), err) // not Redis's fault: exit 2
	case err != nil:
		return t.failure(err, "acquiring %s: %v", shortName(name), err)
	case !ok:
		return exitf(exitNotAcquired, "%s not acquired within %v: another owner holds it", name, f.wait)
	}

	code, lost := a.supervise(m, name, argv, f.grace, sigs)
	uerr := a.release(ctx, m, name, argv[0]+" exited", ttl, sigs)
	switch {
	case lost:
		return exitf(exitLost, "lost the lock %s while %s was running", name, argv[0])
	case errors.Is(uerr, dlock.ErrLockLost) && !errors.Is(uerr, dlock.ErrReleaseFailed):
		return exitf(exitLost, "lost the lock %s before %s finished: %s", name, argv[0], lossReason(uerr))
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// startChild starts cmd from a goroutine locked to its OS thread, which
// stays alive until cmd exits: the parent-death signal (prepareChild) fires
// when the thread that forked the child ends, not only when dlock does. The
// returned channel gets cmd.Wait's result.
func startChild(cmd *exec.Cmd) (<-chan error, error) {
	prepareChild(cmd)
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// supervise runs CMD while m is held and returns its exit code and whether
// the lock was lost meanwhile (CMD was then told to stop, and why printed).
// The first signal in sigs is passed on to CMD; the second sends SIGTERM and,
// after grace, SIGKILL; a third SIGKILL at once.
func (a *app) supervise(m heldLock, name string, argv []string, grace time.Duration, sigs <-chan os.Signal) (int, bool) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	exited, err := startChild(cmd)
	if err != nil {
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		fmt.Fprintf(a.stderr, "dlock: cannot run %s: %s\n", argv[0], oneLine(err.Error()))
		return code, false
	}

	done := m.Done()
	var kill <-chan time.Time
	var killTimer *time.Timer
	defer func() {
		if killTimer != nil {
			killTimer.Stop()
		}
	}()
	// terminate sends SIGTERM now and SIGKILL after grace (once).
	terminate := func() {
		_ = signalChild(cmd, syscall.SIGTERM)
		if killTimer == nil {
			killTimer = time.NewTimer(grace)
			kill = killTimer.C
		}
	}
	lost := false
	signals := 0
	for {
		select {
		case s := <-sigs:
			signals++
			sig, _ := s.(syscall.Signal)
			switch signals {
			case 1:
				_ = signalChild(cmd, sig)
				fmt.Fprintf(a.stderr, "dlock: passed %v to %s; another signal stops it (SIGTERM, SIGKILL after %v)\n", s, argv[0], grace)
			case 2:
				fmt.Fprintf(a.stderr, "dlock: second signal: sending SIGTERM to %s, SIGKILL in %v\n", argv[0], grace)
				terminate()
			default:
				fmt.Fprintf(a.stderr, "dlock: sending SIGKILL to %s\n", argv[0])
				_ = signalChild(cmd, syscall.SIGKILL)
			}
		case <-done:
			done = nil
			cause := m.Err()
			if cause == nil {
				continue // cannot happen while held; be safe
			}
			lost = true
			fmt.Fprintf(a.stderr, "dlock: lost the lock %s: %s; sending SIGTERM to %s, SIGKILL in %v\n", name, lossReason(cause), argv[0], grace)
			terminate()
		case <-kill:
			kill = nil
			fmt.Fprintf(a.stderr, "dlock: %s still running %v after SIGTERM; sending SIGKILL\n", argv[0], grace)
			_ = signalChild(cmd, syscall.SIGKILL)
		case err := <-exited:
			if killTimer != nil && kill != nil {
				// CMD left at the SIGTERM, but the SIGKILL promised after
				// grace is for its whole group: a job it started that
				// ignores SIGTERM must not run on without the lock.
				a.killGroupAfter(cmd, argv[0], grace, kill, sigs)
			}
			return exitCode(err), lost
		}
	}
}

// killGroupAfter waits, once CMD has exited while being terminated, until
// the rest of its process group has left too or kill fires (the grace after
// SIGTERM ran out), and then sends the group SIGKILL. Another signal in sigs
// sends it at once.
func (a *app) killGroupAfter(cmd *exec.Cmd, what string, grace time.Duration, kill <-chan time.Time, sigs <-chan os.Signal) {
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for groupAlive(cmd) {
		select {
		case <-poll.C:
		case <-kill:
			fmt.Fprintf(a.stderr, "dlock: processes %s started still running %v after SIGTERM; sending SIGKILL to its process group\n", what, grace)
			_ = signalChild(cmd, syscall.SIGKILL)
			return
		case <-sigs:
			fmt.Fprintf(a.stderr, "dlock: sending SIGKILL to the process group of %s\n", what)
			_ = signalChild(cmd, syscall.SIGKILL)
			return
		}
	}
}

// exitCode is a finished command's exit status as a shell reports it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitFailure
}
