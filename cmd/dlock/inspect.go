package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/dlock-dev/dlock"
	disc "github.com/dlock-dev/dlock/internal/discover"
)

// lockState is what inspect reports about one lock name; its JSON form is
// the --json output's array element.
type lockState struct {
	Name   string `json:"name"`
	Locked bool   `json:"locked"`
	// Kind is "mutex" (a Mutex or FairMutex: they share the layout) or
	// "rwlock" (a read-write lock: its hash has a "mode" field); "" when
	// nothing is held.
	Kind string `json:"kind"`
	// Mode is "read" or "write" for a held read-write lock, else "".
	Mode    string   `json:"mode"`
	Holders []holder `json:"holders"`
	// TTLms is the lock key's remaining TTL in milliseconds: 0 when not
	// locked, -1 when the key has no TTL (not set by dlock).
	TTLms int64 `json:"ttl_ms"`
	// Token is the last fencing token issued for the name (0: none kept).
	Token   uint64   `json:"token"`
	Waiters []waiter `json:"waiters"`
	// MoreWaiters counts the waiters queued behind those listed (the
	// library lists the first dlock.MaxWaitersListed).
	MoreWaiters int `json:"more_waiters,omitempty"`
	// WaitingWriters counts the writers waiting for a read-write lock.
	WaitingWriters int `json:"waiting_writers"`
}

// holder is one owner of a lock. Host and PID come from the owner's client
// id (dlock.ParseClientID): "" and 0 for ids in another form (Redisson's
// UUIDs, WithClientID).
type holder struct {
	Owner string `json:"owner"` // "<client id>:<owner id>", raw
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Count int64  `json:"count"` // reentrant hold count; a semaphore permit's number of permits
	// TTLms is a semaphore permit's remaining lease (inspect --all only).
	TTLms int64 `json:"ttl_ms,omitempty"`
	// HeldForMs and Renewals describe a hold the watchdog renewed: how
	// long it has been held and how often renewed (0 for younger holds).
	HeldForMs int64 `json:"held_for_ms,omitempty"`
	Renewals  int64 `json:"renewals,omitempty"`
}

// waiter is an owner queued for the lock in dlock:queue:{name}: waiters of a
// Mutex queued for a direct hand-off, and the arrival-order queue of a
// FairMutex (the two share the layout).
type waiter struct {
	Position int    `json:"position"` // 1 is next
	Owner    string `json:"owner"`
	Host     string `json:"host"`
	PID      int    `json:"pid"`
	TTLms    int64  `json:"ttl_ms"` // the TTL the waiter asked for
}

func (a *app) inspectCommand() *cobra.Command {
	var asJSON, all, history bool
	var match string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "inspect [--json] NAME... | inspect --all [--history] [--match PATTERN] [--json]",
		Short: "Show who holds and who waits for locks",
		Long: `inspect reads each lock from Redis (one MULTI per name) and shows whether it
is locked, its kind (mutex, or rwlock with its read/write mode), its holders
(the host and process id of the holding client, its reentrant hold count), the
lock's remaining TTL, the last fencing token issued for the name, and the
owners queued for it, first in line first: waiters of a plain lock queued for
a direct hand-off, or the arrival-order queue of a fair lock (run --fair). It
changes nothing.

Host and process come from dlock's default client id "<host>/<pid>/<random>";
a holder with another id (a Redisson client, WithClientID) is shown by its
raw owner "<client id>:<owner id>".

With --json it prints one JSON array with an object per NAME:
  {"name", "locked", "kind", "mode", "holders": [{"owner", "host", "pid",
   "count"}], "ttl_ms", "token", "waiters": [{"position", "owner", "host",
   "pid", "ttl_ms"}], "waiting_writers"}
host is "" and pid 0 when the owner is not in dlock's default form.

With --all it lists every lock, election, semaphore and count-down latch
in use in the Redis (every master of a Cluster), found with SCAN in pages
(never KEYS): locks held, elections led, semaphores with permits taken,
latches armed; never dlock's own keys beside them. --history adds the
locks and elections nobody holds now that were used in the last 24 hours
(their fencing counter is alive), as "not locked". --match keeps the names
matching a Redis glob pattern (as SCAN MATCH reads it: * ? [abc] [^a-z] and
\ escapes; at most 4096 bytes), matched without backtracking, so no
pattern can stall it. Each entry says its
type ("lock", "election", "semaphore", "latch"), its holders with their
TTLs, and its waiters: an election's leader value and waiting candidates, a
semaphore's size, permits taken and free, each holder's permit with how
many permits it holds (its "count"; a permit of AcquireN(k) has an id
ending in "#k") and the queued waiters; a latch's count and TTL (latches
armed by dlock: one armed by Redisson has no dlock:latch:{name} marker and
is not found). With --json each object also has "type", "leader",
"permits" (the size), "taken", "free" and "count" (a latch's), and a
semaphore holder has "ttl_ms".

--timeout bounds the reading after the first PING (the whole SCAN with
--all): past it inspect gives up with exit code 1.

Exit codes: 0 done, 1 a NAME is not a lock (another Redis type), no answer
within --timeout, or another failure, 2 bad arguments, 69 Redis
unreachable, 77 Redis refused the first PING (a wrong password, an ACL
denial).`,
		Example: `  dlock inspect coupon:issue:42
  dlock inspect --json nightly-report migrate | jq '.[] | select(.locked) | .holders'
  dlock inspect --all --match 'report:*'
  dlock inspect --all --history`,
		Args: wrapArgs(func(cmd *cobra.Command, args []string) error {
			if all {
				if len(args) > 0 {
					return fmt.Errorf("--all takes no NAME (use --match PATTERN), got %d", len(args))
				}
				return nil
			}
			if match != "" {
				return fmt.Errorf("--match goes with --all")
			}
			if history {
				return fmt.Errorf("--history goes with --all")
			}
			if len(args) == 0 {
				return fmt.Errorf("inspect needs a lock NAME, or --all to list every lock")
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case timeout <= 0:
				return usagef("--timeout must be positive, got %v", timeout)
			case len(match) > disc.MaxPatternLen:
				return usagef("--match is %d bytes, the limit is %d", len(match), disc.MaxPatternLen)
			}
			if all {
				return a.inspectAll(cmd.Context(), match, history, asJSON, timeout)
			}
			for _, n := range args {
				if err := checkName("NAME", n); err != nil {
					return err
				}
			}
			rdb, _, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			locks, err := dlock.New(rdb, a.clientOptions()...)
			if err != nil {
				return err
			}
			defer locks.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			states := make([]lockState, 0, len(args))
			for _, n := range args {
				st, err := inspect(ctx, locks, n)
				if err != nil {
					return timedOut(err, timeout)
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
	cmd.Flags().BoolVar(&all, "all", false, "list every lock, election, semaphore and latch (SCAN)")
	cmd.Flags().StringVar(&match, "match", "", "with --all: only names matching this Redis glob pattern")
	cmd.Flags().DurationVar(&timeout, "timeout", inspectTimeout, "bound on the reading after the first PING (the whole scan with --all)")
	cmd.Flags().BoolVar(&history, "history", false, "with --all: also the names not held now that were used in the last 24h")
	return cmd
}

// inspectTimeout is inspect's default --timeout.
const inspectTimeout = time.Minute

// timedOut words an error of a reading that ran out of --timeout.
func timedOut(err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return exitf(exitFailure, "no answer from Redis within %v (raise --timeout)", timeout)
	}
	return err
}

// inspect reads one lock in a single MULTI/EXEC, so the parts agree.
func inspect(ctx context.Context, locks *dlock.Client, name string) (lockState, error) {
	info, err := locks.Inspect(ctx, name)
	if err != nil {
		return lockState{}, err
	}
	return stateOf(info), nil
}

// stateOf converts the library's snapshot.
func stateOf(info dlock.LockInfo) lockState {
	st := lockState{Name: info.Name, Locked: info.Locked, Token: info.Token, Mode: info.Mode,
		Holders: []holder{}, Waiters: []waiter{}, MoreWaiters: info.MoreWaiters, WaitingWriters: info.WaitingWriters}
	switch {
	case info.Mode != "":
		st.Kind = "rwlock"
	case info.Locked || len(info.Waiters) > 0:
		st.Kind = "mutex"
	}
	for _, h := range info.Holders {
		host, pid, _ := dlock.ParseClientID(h.Owner)
		st.Holders = append(st.Holders, holder{Owner: h.Owner, Host: host, PID: pid, Count: h.Count, TTLms: h.TTL.Milliseconds(),
			HeldForMs: h.HeldFor.Milliseconds(), Renewals: h.Renewals})
	}
	switch {
	case info.TTL < 0:
		st.TTLms = -1
	case info.TTL > 0:
		st.TTLms = info.TTL.Milliseconds()
	}
	for i, w := range info.Waiters {
		host, pid, _ := dlock.ParseClientID(w.Owner)
		st.Waiters = append(st.Waiters, waiter{Position: i + 1, Owner: w.Owner, Host: host, PID: pid, TTLms: w.TTL.Milliseconds()})
	}
	return st
}

// who names an owner for people: "host pid N", or the raw owner when its
// client id is not in dlock's default form.
func who(host string, pid int, owner string) string {
	if host == "" {
		return printable(owner)
	}
	return printable(host) + " pid " + strconv.Itoa(pid)
}

// printable is s as it is when a terminal shows it as text, else quoted:
// owners, hosts and names come from Redis, which anyone allowed to write
// there fills, and must not reach an operator's terminal as escape codes.
func printable(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

func printState(w io.Writer, st lockState) {
	name := displayName(st.Name)
	switch {
	case !st.Locked:
		fmt.Fprintf(w, "%s: not locked", name)
	case st.TTLms < 0:
		fmt.Fprintf(w, "%s: locked, no TTL (not set by dlock?)", name)
	default:
		fmt.Fprintf(w, "%s: locked, expires in %v", name, time.Duration(st.TTLms)*time.Millisecond)
	}
	if st.Mode != "" {
		fmt.Fprintf(w, ", read-write lock in %s mode", printable(st.Mode))
	}
	if st.Token != 0 {
		fmt.Fprintf(w, ", last fencing token %d", st.Token)
	}
	fmt.Fprintln(w)
	for _, h := range st.Holders {
		held := ""
		if h.Renewals > 0 {
			unit := "renewals"
			if h.Renewals == 1 {
				unit = "renewal"
			}
			held = fmt.Sprintf("  held for %v, %d %s", (time.Duration(h.HeldForMs) * time.Millisecond).Round(time.Second), h.Renewals, unit)
		}
		fmt.Fprintf(w, "  holder  %s  count %d%s  (owner %s)\n", who(h.Host, h.PID, h.Owner), h.Count, held, printable(h.Owner))
	}
	for _, q := range st.Waiters {
		fmt.Fprintf(w, "  waiter  #%d  %s  (owner %s)\n", q.Position, who(q.Host, q.PID, q.Owner), printable(q.Owner))
	}
	printMoreWaiters(w, st.MoreWaiters)
	if st.WaitingWriters > 0 {
		fmt.Fprintf(w, "  %d writer(s) waiting\n", st.WaitingWriters)
	}
}

// printMoreWaiters says how many waiters are queued behind those listed.
func printMoreWaiters(w io.Writer, n int) {
	if n > 0 {
		fmt.Fprintf(w, "  %d more waiter(s) queued\n", n)
	}
}
