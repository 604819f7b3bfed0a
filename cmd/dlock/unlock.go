package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-dev/dlock"
)

func (a *app) unlockCommand() *cobra.Command {
	var force bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "unlock --force NAME",
		Short: "Break a lock, whoever holds it",
		Long: `unlock --force releases the lock NAME whoever holds it, and says what
happened: whether it was held and by whom, and whether a queued waiter took
it over (the release hands the lock straight to the first queued waiter) or
nobody was waiting. It reads the lock before and after the release (two
MULTIs) to tell.

This is for locks left behind by a stuck process. The holder is not asked: a
dlock holder is told at once (the release sends its client a message, on
which it checks Redis; about a millisecond on one host) or, if that message
is lost, at its next renewal (within a third of its TTL), and, if it uses
dlock's loss signal, stops; until then two processes may both believe they
hold it. Hence --force is required.

NAME must be a lock: a key of another Redis type, or a hash whose fields are
not a lock's (owners with hold counts, as dlock and Redisson write them), is
left as it is, and the command exits 65. The check and the release are one
script in Redis: nothing can change the key in between.

Without --namespace, a NAME "ns:rest" that namespace ns uses as its lock
rest (its fencing counter exists) is refused with exit 2: unlock it with
--namespace ns, so that its holder is told and its waiters served.

Everything after the first PING is bounded by --timeout (10s by default):
a Redis that stops answering meanwhile (paused, overloaded, partitioned)
ends the command with exit 69 within --timeout and a second, instead of after go-redis' read
timeouts and retries (about 20 seconds with its defaults). The release may
or may not have happened, unless the message says it was released (only
the reading of the lock after it ran out of time): read the lock again
with dlock inspect before running unlock again, which would break the lock
of a waiter it was handed to.

Exit codes: 0 done (held or not), 2 without --force, with a bad name or
with a tenant's lock without its namespace, 65 NAME is not a lock (left as
it is), 69 Redis unreachable or not answering, 77 Redis refused (a wrong
password, an ACL denial), 1 other failures.`,
		Example: `  dlock unlock --force nightly-report
  dlock --redis redis://10.0.0.5:6379/2 unlock --force coupon:issue:42`,
		Args: wrapArgs(func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("unlock takes one lock NAME, got %d arguments", len(args))
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName("NAME", name); err != nil {
				return err
			}
			if timeout <= 0 {
				return usagef("--timeout must be above 0, got %v", timeout)
			}
			if !force {
				return exitf(exitUsage, "refusing to unlock %s without --force: this breaks the lock under its holder, which may still be working (see dlock unlock --help)", name)
			}
			rdb, t, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			// Close waits for what the release left in the background (a
			// call Redis did not answer in time, resent): a second at most,
			// so that the command ends within --timeout and a second.
			c, err := dlock.New(rdb, append(a.clientOptions(), dlock.WithCloseTimeout(time.Second))...)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			msg, err := forceUnlockMsg(ctx, c, name)
			var coded *exitError
			var after *afterRelease
			switch {
			case errors.As(err, &coded):
				return err
			case errors.As(err, &after) && ctx.Err() != nil && cmd.Context().Err() == nil:
				// The release was answered: it happened, and only the
				// reading that follows it ran out of time.
				return exitf(exitUnavailable, "%s released, but no answer from Redis at %s within --timeout %v to reading it after the release (dlock inspect %s tells who holds it now)", name, t.where(), timeout, name)
			case err != nil && ctx.Err() != nil && cmd.Context().Err() == nil:
				return exitf(exitUnavailable, "no answer from Redis at %s within --timeout %v: %s may or may not be released (dlock inspect %s tells)", t.where(), timeout, name, name)
			case err != nil:
				// A refusal exits 77, no answer 69, as after the PING.
				return t.failure(err, "no answer from Redis at %s: %v", t.where(), err)
			}
			fmt.Fprintln(a.stdout, msg)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "really release the lock under its holder")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for Redis's answers after the first PING; exit 69 after it")
	return cmd
}

// forceUnlockMsg breaks the lock name and describes what happened, from the
// lock's state before and after.
func forceUnlockMsg(ctx context.Context, c *dlock.Client, name string) (string, error) {
	before, err := c.Inspect(ctx, name)
	if err != nil {
		return "", notLock(fmt.Errorf("reading %s: %w", name, err))
	}
	held, err := c.Mutex(name).ForceUnlock(ctx)
	if err != nil {
		return "", notLock(fmt.Errorf("unlocking %s: %w", name, err))
	}
	if !held {
		return name + " was not held: nothing to do", nil
	}
	after, err := c.Inspect(ctx, name)
	if err != nil {
		return "", &afterRelease{fmt.Errorf("reading %s after the release: %w", name, err)}
	}
	msg := name + " was held: released it"
	if len(before.Holders) > 0 {
		msg = name + " was held by " + holders(stateOf(before)) + ": released it"
	}
	switch {
	case after.Locked:
		msg += "; handed it to the next waiter, now held by " + holders(stateOf(after))
	case len(before.Waiters) > 0 || before.WaitingWriters > 0:
		msg += "; woke the waiters"
	default:
		msg += "; nobody was waiting"
	}
	return msg, nil
}

// afterRelease is forceUnlockMsg's error when the release happened and
// only the reading of the lock after it failed.
type afterRelease struct{ err error }

func (e *afterRelease) Error() string { return e.err.Error() }
func (e *afterRelease) Unwrap() error { return e.err }

// notLock gives an error that says NAME is not a lock its own exit code.
func notLock(err error) error {
	switch {
	case errors.Is(err, dlock.ErrNotLock):
		return exitf(exitNotLock, "%v", err)
	case errors.Is(err, dlock.ErrInvalidArgument):
		return exitf(exitUsage, "%v", err) // a tenant's lock without its namespace
	}
	return err
}

// holders lists a lock's holders for people.
func holders(st lockState) string {
	if len(st.Holders) == 0 {
		return "nobody"
	}
	var out []string
	for _, h := range st.Holders {
		out = append(out, who(h.Host, h.PID, h.Owner))
	}
	return strings.Join(out, ", ")
}
