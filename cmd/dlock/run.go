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
lost the key, renewal failed for a whole TTL, or the --lease ran out), CMD gets
SIGTERM, then SIGKILL after --grace, and dlock exits 76.

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
  69            Redis could not be reached
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

	rdb, _, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	c, err := dlock.New(rdb, append(a.clientOptions(), dlock.WithWatchdogTimeout(f.watchdog))...)
	if err != nil {
		return err
	}
	defer c.Close()
	var m heldLock = c.Mutex(name)
	if f.fair {
		m = c.FairMutex(name)
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
			_ = m.Unlock(context.WithoutCancel(ctx))
		}
		return exitf(signalCode(interrupted), "interrupted by %v while waiting for %s", interrupted, shortName(name))
	}
	switch {
	case err != nil:
		return fmt.Errorf("acquiring %s: %w", shortName(name), err)
	case !ok:
		return exitf(exitNotAcquired, "%s not acquired within %v: another owner holds it", name, f.wait)
	}

	code, lostMsg := a.supervise(m, name, argv, f.grace, sigs)

	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer ucancel()
	uerr := m.Unlock(uctx)
	switch {
	case lostMsg != "":
		return exitf(exitLost, "%s", lostMsg)
	case errors.Is(uerr, dlock.ErrLockLost):
		return exitf(exitLost, "lost the lock %s before %s finished: %v", name, argv[0], uerr)
	case uerr != nil:
		fmt.Fprintf(a.stderr, "dlock: releasing %s failed (it expires by its TTL): %s\n", name, oneLine(uerr.Error()))
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

// supervise runs CMD while m is held and returns its exit code, or, when the
// lock was lost meanwhile, the message to print (CMD has then been stopped).
// The first signal in sigs is passed on to CMD; the second sends SIGTERM and,
// after grace, SIGKILL; a third SIGKILL at once.
func (a *app) supervise(m heldLock, name string, argv []string, grace time.Duration, sigs <-chan os.Signal) (int, string) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	exited, err := startChild(cmd)
	if err != nil {
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		fmt.Fprintf(a.stderr, "dlock: cannot run %s: %s\n", argv[0], oneLine(err.Error()))
		return code, ""
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
	var lostMsg string
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
			lostMsg = fmt.Sprintf("lost the lock %s while %s was running (%s); stopped it", name, argv[0], oneLine(cause.Error()))
			fmt.Fprintf(a.stderr, "dlock: lost the lock %s; sending SIGTERM to %s, SIGKILL in %v\n", name, argv[0], grace)
			terminate()
		case <-kill:
			kill = nil
			fmt.Fprintf(a.stderr, "dlock: %s still running %v after SIGTERM; sending SIGKILL\n", argv[0], grace)
			_ = signalChild(cmd, syscall.SIGKILL)
		case err := <-exited:
			return exitCode(err), lostMsg
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
