package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

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
			states := make([]lockState, 0, len(args))
			for _, n := range args {
				st, err := inspect(cmd.Context(), rdb, n)
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
func inspect(ctx context.Context, rdb redis.UniversalClient, name string) (lockState, error) {
	ks := keys.For(name)
	var typ *redis.StatusCmd
	var fields *redis.MapStringStringCmd
	var pttl *redis.DurationCmd
	var fence *redis.StringCmd
	var queue *redis.StringSliceCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		typ = p.Type(ctx, ks.Lock)
		fields = p.HGetAll(ctx, ks.Lock)
		pttl = p.PTTL(ctx, ks.Lock)
		fence = p.Get(ctx, ks.Fence)
		queue = p.LRange(ctx, ks.Queue, 0, -1)
		return nil
	})
	st := lockState{Name: name, Holders: []holder{}, Waiters: []waiter{}}
	if t := typ.Val(); t != "" && t != "none" && t != "hash" {
		return st, fmt.Errorf("%s is a Redis %s, not a dlock lock", name, t)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("reading %s: %w", name, err)
	}
	for owner, v := range fields.Val() {
		n, _ := strconv.ParseInt(v, 10, 64)
		st.Holders = append(st.Holders, holder{Owner: owner, Count: n})
	}
	sort.Slice(st.Holders, func(i, j int) bool { return st.Holders[i].Owner < st.Holders[j].Owner })
	st.Locked = len(st.Holders) > 0
	switch d := pttl.Val(); {
	case !st.Locked:
	case d == -1:
		st.TTLms = -1
	case d > 0:
		st.TTLms = d.Milliseconds()
	}
	if v, err := fence.Uint64(); err == nil {
		st.Token = v
	}
	for i, e := range queue.Val() {
		// "<ticket> <ttl_ms> <owner field>"
		parts := strings.SplitN(e, " ", 3)
		w := waiter{Position: i + 1, Owner: e}
		if len(parts) == 3 {
			w.Owner = parts[2]
			w.TTLms, _ = strconv.ParseInt(parts[1], 10, 64)
		}
		st.Waiters = append(st.Waiters, w)
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
