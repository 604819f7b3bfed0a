package kind

import "time"

// Public turns a LockInfo into the public package's (dlock.LockInfo, with
// its Holder and Waiter): types of the same fields that this package cannot
// name. The constraints spell those fields, so that the compiler checks
// both shapes; the slices are copied (nil stays nil), once per name read.
// Used by the root package and by tools that read layouts directly (the
// CLI's dashboard).
func Public[I ~struct {
	Type           string
	Name           string
	Locked         bool
	Mode           string
	Holders        []H
	TTL            time.Duration
	Token          uint64
	Waiters        []W
	MoreWaiters    int
	WaitingWriters int
	Leader         string
	Permits        int
	Count          int64
}, H ~struct {
	Owner    string
	Count    int64
	TTL      time.Duration
	Host     string
	PID      int
	HeldFor  time.Duration
	Renewals int64
}, W ~struct {
	Owner string
	TTL   time.Duration
}](k LockInfo) I {
	var holders []H
	if k.Holders != nil {
		holders = make([]H, len(k.Holders))
		for i, h := range k.Holders {
			holders[i] = H(h)
		}
	}
	var waiters []W
	if k.Waiters != nil {
		waiters = make([]W, len(k.Waiters))
		for i, w := range k.Waiters {
			waiters[i] = W(w)
		}
	}
	return I{Type: k.Type, Name: k.Name, Locked: k.Locked, Mode: k.Mode, Holders: holders, TTL: k.TTL, Token: k.Token,
		Waiters: waiters, MoreWaiters: k.MoreWaiters, WaitingWriters: k.WaitingWriters, Leader: k.Leader, Permits: k.Permits, Count: k.Count}
}
