package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/keys"
)

// lockState is what inspect reports about one lock name; its JSON form is
// the --json output's array element.
type lockState struct {
	Name    string   `json:"name"`
	Locked  bool     `json:"locked"`
	Holders []holder `json:"holders"`
	// TTLms is the lock key's remaining TTL in milliseconds: 0 when not
	// locked, -1 when the key has no TTL (not set by dlock).
	TTLms int64 `json:"ttl_ms"`
	// Token is the last fencing token issued for the name (0: none kept).
	Token   uint64   `json:"token"`
	Waiters []waiter `json:"waiters"`
}

type holder struct {
	Owner string `json:"owner"` // "<client id>:<owner id>"
	Count int64  `json:"count"` // reentrant hold count
}

// waiter is an owner queued for the lock in dlock:queue:{name}: waiters of a
// Mutex queued for a direct hand-off, and the arrival-order queue of a
// FairMutex (the two share the layout).
type waiter struct {
	Position int    `json:"position"` // 1 is next
	Owner    string `json:"owner"`
	TTLms    int64  `json:"ttl_ms,omitempty"` // the TTL the waiter asked for
}

func (a *app) inspectCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect [--json] NAME...",
		Short: "Show who holds and who waits for locks",
		Long: `inspect reads each lock from Redis and shows whether it is locked, its holders
(owner "<client id>:<owner id>" and reentrant hold count), the lock's remaining
TTL, the last fencing token issued for the name, and the owners queued for
it, first in line first: waiters of a plain lock queued for a direct hand-off,
or the arrival-order queue of a fair lock (run --fair). It changes nothing.

With --json it prints one JSON array with an object per NAME:
  {"name", "locked", "holders": [{"owner", "count"}], "ttl_ms", "token",
   "waiters": [{"position", "owner", "ttl_ms"}]}`,
		Example: `  dlock inspect coupon:issue:42
  dlock inspect --json nightly-report migrate | jq '.[] | select(.locked)'`,
		Args: wrapArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, n := range args {
				if err := keys.Validate(n); err != nil {
					return usagef("lock name %q: %v", n, err)
				}
			}
			rdb, _, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			locks, err := dlock.New(rdb)
			if err != nil {
				return err
			}
			defer locks.Close()
			states := make([]lockState, 0, len(args))
			for _, n := range args {
				st, err := inspect(cmd.Context(), locks, n)
				if err != nil {
					return err
				}
				states = append(states, st)
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(states)
			}
			for _, st := range states {
				printState(a.stdout, st)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

// inspect reads one lock in a single MULTI/EXEC, so the parts agree.
func inspect(ctx context.Context, locks *dlock.Client, name string) (lockState, error) {
	info, err := locks.Inspect(ctx, name)
	if err != nil {
		return lockState{}, err
	}
	st := lockState{Name: name, Locked: info.Locked, Token: info.Token, Holders: []holder{}, Waiters: []waiter{}}
	for _, h := range info.Holders {
		st.Holders = append(st.Holders, holder{Owner: h.Owner, Count: h.Count})
	}
	switch {
	case info.TTL < 0:
		st.TTLms = -1
	case info.TTL > 0:
		st.TTLms = info.TTL.Milliseconds()
	}
	for i, w := range info.Waiters {
		st.Waiters = append(st.Waiters, waiter{Position: i + 1, Owner: w.Owner, TTLms: w.TTL.Milliseconds()})
	}
	return st, nil
}

func printState(w io.Writer, st lockState) {
	switch {
	case !st.Locked:
		fmt.Fprintf(w, "%s: not locked", st.Name)
	case st.TTLms < 0:
		fmt.Fprintf(w, "%s: locked, no TTL (not set by dlock?)", st.Name)
	default:
		fmt.Fprintf(w, "%s: locked, expires in %v", st.Name, time.Duration(st.TTLms)*time.Millisecond)
	}
	if st.Token != 0 {
		fmt.Fprintf(w, ", last fencing token %d", st.Token)
	}
	fmt.Fprintln(w)
	for _, h := range st.Holders {
		fmt.Fprintf(w, "  holder  %s  count %d\n", h.Owner, h.Count)
	}
	for _, q := range st.Waiters {
		fmt.Fprintf(w, "  waiter  #%d  %s\n", q.Position, q.Owner)
	}
}
