package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/dlock-dev/dlock"
)

// listedState is one entry of inspect --all and of the dashboard: a lock's
// state, and what an election, a semaphore or a latch adds.
type listedState struct {
	Type string `json:"type"` // "lock", "election", "semaphore" or "latch"
	lockState
	Leader  string `json:"leader"`  // an election's leader value
	Permits int    `json:"permits"` // a semaphore's number of permits (its size)
	// Taken is the permits a semaphore's holders take (each holder's
	// count summed), Free what is left of its size (0 when SetPermits
	// shrank it below Taken).
	Taken int64 `json:"taken"`
	Free  int64 `json:"free"`
	// Count is a latch's count (Locked while above zero).
	Count int64 `json:"count"`
}

// listed converts the library's snapshot of any type.
func listed(info dlock.LockInfo) listedState {
	st := listedState{Type: info.Type, lockState: stateOf(info), Leader: info.Leader, Permits: info.Permits, Count: info.Count}
	switch info.Type {
	case dlock.TypeElection:
		st.Kind = "election"
	case dlock.TypeSemaphore:
		st.Kind = "semaphore"
		for _, h := range info.Holders {
			st.Taken += h.Count
		}
		st.Free = max(int64(info.Permits)-st.Taken, 0)
	case dlock.TypeLatch:
		st.Kind = "latch"
	}
	return st
}

// inspectAll lists everything Client.Locks finds (LocksWithHistory's, with
// history) within timeout.
func (a *app) inspectAll(ctx context.Context, match string, history, asJSON bool, timeout time.Duration) error {
	rdb, _, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	locks, err := dlock.New(rdb, a.clientOptions()...)
	if err != nil {
		return err
	}
	defer locks.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list := locks.Locks
	if history {
		list = locks.LocksWithHistory
	}
	infos, err := list(ctx, match)
	if err != nil {
		return timedOut(err, timeout)
	}
	out := make([]listedState, 0, len(infos))
	for _, info := range infos {
		out = append(out, listed(info))
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(out) == 0 {
		fmt.Fprintln(a.stdout, "no locks, elections, semaphores or latches found")
	}
	for _, st := range out {
		printListed(a.stdout, st)
	}
	return nil
}

func printListed(w io.Writer, st listedState) {
	switch st.Type {
	case dlock.TypeElection:
		name := displayName(st.Name)
		if st.Leader == "" && !st.Locked {
			fmt.Fprintf(w, "election %s: no leader\n", name)
		} else {
			fmt.Fprintf(w, "election %s: leader %q, expires in %v\n", name, st.Leader, time.Duration(st.TTLms)*time.Millisecond)
		}
		for _, h := range st.Holders {
			fmt.Fprintf(w, "  leader     %s  (owner %s)\n", who(h.Host, h.PID, h.Owner), printable(h.Owner))
		}
		for _, q := range st.Waiters {
			fmt.Fprintf(w, "  candidate  #%d  %s  (owner %s)\n", q.Position, who(q.Host, q.PID, q.Owner), printable(q.Owner))
		}
		printMoreWaiters(w, st.MoreWaiters)
	case dlock.TypeSemaphore:
		fmt.Fprintf(w, "semaphore %s: %d of %d permits taken, %d free\n", displayName(st.Name), st.Taken, st.Permits, st.Free)
		for _, h := range st.Holders {
			fmt.Fprintf(w, "  permit  %s  x%d  expires in %v  (id %s)\n", who(h.Host, h.PID, h.Owner), h.Count, time.Duration(h.TTLms)*time.Millisecond, printable(h.Owner))
		}
		for _, q := range st.Waiters {
			fmt.Fprintf(w, "  waiter  #%d  %s  (id %s)\n", q.Position, who(q.Host, q.PID, q.Owner), printable(q.Owner))
		}
		printMoreWaiters(w, st.MoreWaiters)
	case dlock.TypeLatch:
		expires := "no TTL (not set by dlock?)"
		if st.TTLms > 0 {
			expires = fmt.Sprintf("expires in %v", time.Duration(st.TTLms)*time.Millisecond)
		}
		fmt.Fprintf(w, "latch %s: count %d, %s\n", displayName(st.Name), st.Count, expires)
	default:
		fmt.Fprint(w, "lock ")
		printState(w, st.lockState)
	}
}

// displayName is a name as inspect prints it: whole, unless it is huge.
func displayName(name string) string {
	if len(name) > 200 {
		return shortName(name)
	}
	return printable(name)
}
