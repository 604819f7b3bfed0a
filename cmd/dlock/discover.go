package main

import (
	"context"
	"sort"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	disc "github.com/dlock-dev/dlock/internal/discover"
)

// inspectCommands is what Client.Inspect sends per lock: MULTI, TYPE,
// HGETALL, PTTL, GET, LRANGE, ZCARD, EXEC (one round trip).
const inspectCommands = 8

// scanCost counts the Redis commands of one discovery.
type scanCost struct {
	Scans   int `json:"scans"`        // SCAN calls
	Probes  int `json:"hash_probes"`  // HRANDFIELD calls
	Inspect int `json:"inspect_cmds"` // commands of the Inspect MULTIs
	Keys    int `json:"keys_seen"`    // keys the scans returned
}

// Total is the commands of the refresh.
func (c scanCost) Total() int { return c.Scans + c.Probes + c.Inspect }

// found is one discovery's result, before the locks are read.
type found struct {
	held map[string]bool // lock hashes
	seen map[string]bool // every name (held, or with a fencing counter)
	cost scanCost
}

// discover finds the locks dlock knows of with the library's discovery
// (internal/discover, which Client.Locks uses too): hashes whose fields look
// like lock owners (SCAN TYPE hash, then HRANDFIELD per hash, pipelined per
// page), and names with a fencing counter (SCAN MATCH dlock:fence:*). It
// stops scanning once it has found limit names.
func discover(ctx context.Context, rdb redis.UniversalClient, limit int) (found, error) {
	d, err := disc.Run(ctx, rdb, disc.Options{Limit: limit})
	f := found{held: d.Held, seen: d.Locks, cost: scanCost{Scans: d.Cost.Scans, Probes: d.Cost.Probes, Keys: d.Cost.Keys}}
	return f, err
}

// readLocks inspects up to limit of the found names, held ones first, each
// in one MULTI.
func readLocks(ctx context.Context, c *dlock.Client, f *found, limit int) ([]lockState, int, error) {
	names := make([]string, 0, len(f.seen))
	for n := range f.seen {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if f.held[names[i]] != f.held[names[j]] {
			return f.held[names[i]]
		}
		return names[i] < names[j]
	})
	more := 0
	if len(names) > limit {
		more = len(names) - limit
		names = names[:limit]
	}
	out := make([]lockState, 0, len(names))
	for _, n := range names {
		info, err := c.Inspect(ctx, n)
		f.cost.Inspect += inspectCommands
		if err != nil {
			if ctx.Err() != nil {
				return out, more, err
			}
			continue // not a lock after all (another type now): skip it
		}
		out = append(out, stateOf(info))
	}
	// Held first (a lock may have been released since the scan), then by name.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Locked && !out[j].Locked })
	return out, more, nil
}
