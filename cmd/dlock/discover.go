package main

import (
	"context"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	disc "github.com/dlock-dev/dlock/internal/discover"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/kind"
)

// The commands of the MULTI blocks that read one entry (one round trip
// each): Client.Inspect's for a lock (MULTI, TYPE, HGETALL, PTTL, GET,
// LRANGE, ZCARD, EXEC), a semaphore's (MULTI, TIME, ZRANGE, GET, LRANGE,
// PTTL, EXEC) and a latch's (MULTI, GET, PTTL, EXEC).
const (
	inspectCommands   = 8
	semaphoreCommands = 7
	latchCommands     = 4
)

// scanCost counts the Redis commands of one discovery.
type scanCost struct {
	Scans   int `json:"scans"`        // SCAN calls
	Probes  int `json:"hash_probes"`  // HRANDFIELD calls
	Inspect int `json:"inspect_cmds"` // commands of the MULTIs that read the entries
	Reads   int `json:"reads"`        // those MULTIs: one per entry shown
	Keys    int `json:"keys_seen"`    // keys the scans returned
}

// Total is the commands of the refresh.
func (c scanCost) Total() int { return c.Scans + c.Probes + c.Inspect }

// found is one discovery's result, before the entries are read.
type found struct {
	held       map[string]bool // lock hashes
	seen       map[string]bool // every lock name (held, or with a fencing counter)
	semaphores map[string]bool // semaphores with permits held
	latches    map[string]bool // latches dlock armed
	space      keys.Space      // the namespace searched (--namespace)
	cost       scanCost
}

// discover finds the locks, semaphores and latches dlock knows of with the
// library's discovery (internal/discover, which Client.Locks uses too):
// hashes whose fields look like lock owners (SCAN TYPE hash, then
// HRANDFIELD per hash, pipelined per page), names with a fencing counter
// (SCAN MATCH dlock:fence:*), semaphores' permit sets (SCAN MATCH
// dlock:semaphore:* TYPE zset) and latches' markers (SCAN MATCH
// dlock:latch:* TYPE string). It stops scanning once it has found limit
// names.
func discover(ctx context.Context, rdb redis.UniversalClient, space keys.Space, limit int) (found, error) {
	// The dashboard shows the names used lately too, held ones first.
	d, err := disc.Run(ctx, rdb, disc.Options{Limit: limit, Semaphores: true, Latches: true, History: true, Space: space})
	f := found{held: d.Held, seen: d.Locks, semaphores: d.Semaphores, latches: d.Latches, space: space,
		cost: scanCost{Scans: d.Cost.Scans, Probes: d.Cost.Probes, Keys: d.Cost.Keys}}
	return f, err
}

// entry is a found name and its type.
type entry struct {
	typ, name string
	active    bool // a held lock, a semaphore with permits held, an armed latch
}

// readLocks reads up to limit of the found entries, active ones first
// (held locks, semaphores, latches), each in one MULTI. It returns them
// and how many were left out.
func readLocks(ctx context.Context, rdb redis.UniversalClient, c *dlock.Client, f *found, limit int) ([]listedState, int, error) {
	es := make([]entry, 0, len(f.seen)+len(f.semaphores)+len(f.latches))
	for n := range f.seen {
		es = append(es, entry{dlock.TypeLock, n, f.held[n]})
	}
	for n := range f.semaphores {
		es = append(es, entry{dlock.TypeSemaphore, n, true})
	}
	for n := range f.latches {
		es = append(es, entry{dlock.TypeLatch, n, true})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].active != es[j].active {
			return es[i].active
		}
		return es[i].name < es[j].name || (es[i].name == es[j].name && es[i].typ < es[j].typ)
	})
	more := 0
	if len(es) > limit {
		more = len(es) - limit
		es = es[:limit]
	}
	out := make([]listedState, 0, len(es))
	for _, e := range es {
		info, err := f.read(ctx, rdb, c, e)
		if err != nil {
			if ctx.Err() != nil {
				return out, more, err
			}
			continue // not what it was (another type now, or gone): skip it
		}
		out = append(out, listed(info))
	}
	// Held first (a lock may have been released since the scan), then by name.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Locked && !out[j].Locked })
	return out, more, nil
}

// read reads one entry in one MULTI and counts its commands.
func (f *found) read(ctx context.Context, rdb redis.UniversalClient, c *dlock.Client, e entry) (dlock.LockInfo, error) {
	f.cost.Reads++
	switch e.typ {
	case dlock.TypeSemaphore:
		f.cost.Inspect += semaphoreCommands
		info, err := kind.ReadSemaphore(ctx, rdb, f.space, e.name)
		return kind.Public[dlock.LockInfo](info), err
	case dlock.TypeLatch:
		f.cost.Inspect += latchCommands
		info, err := kind.ReadLatch(ctx, rdb, f.space, e.name)
		return kind.Public[dlock.LockInfo](info), err
	}
	f.cost.Inspect += inspectCommands
	return c.Inspect(ctx, e.name)
}
