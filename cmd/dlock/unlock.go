package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dlock-dev/dlock"
)

func (a *app) unlockCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "unlock --force NAME",
		Short: "Break a lock, whoever holds it",
		Long: `unlock --force releases the lock NAME whoever holds it and passes it to the
next queued waiter (or wakes the waiters), and says whether anything was held.

This is for locks left behind by a stuck process. The holder is not asked: it
learns that it lost the lock at its next renewal (within a third of its TTL)
and, if it uses dlock's loss signal, stops; until then two processes may both
believe they hold it. Hence --force is required.

Exit codes: 0 done (held or not), 2 without --force or with a bad name,
69 Redis unreachable, 1 other failures.`,
		Example: `  dlock unlock --force nightly-report
  dlock --redis redis://10.0.0.5:6379/2 unlock --force coupon:issue:42`,
		Args: wrapArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !force {
				return exitf(exitUsage, "refusing to unlock %s without --force: this breaks the lock under its holder, which may still be working (see dlock unlock --help)", name)
			}
			rdb, _, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			c, err := dlock.New(rdb, a.clientOptions()...)
			if err != nil {
				return err
			}
			defer c.Close()
			held, err := c.Mutex(name).ForceUnlock(cmd.Context())
			if err != nil {
				return fmt.Errorf("unlocking %s: %w", name, err)
			}
			if held {
				fmt.Fprintf(a.stdout, "%s was held: released it and woke the next waiter\n", name)
			} else {
				fmt.Fprintf(a.stdout, "%s was not held: nothing to do\n", name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "really release the lock under its holder")
	return cmd
}
