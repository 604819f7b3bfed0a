package main

import (
	"context"
	"errors"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/keys"
)

// scanCount is the COUNT hint of every SCAN the dashboard sends.
const scanCount = 1000

// probeFields is how many fields of a hash the dashboard samples
// (HRANDFIELD) to decide whether it is a lock.
const probeFields = 5

// inspectCommands is what Client.Inspect sends per lock: MULTI, TYPE,
// HGETALL, PTTL, GET, LRANGE, ZCARD, EXEC (one round trip).
const inspectCommands = 8

// ownerField matches a lock hash's owner field: dlock's and Redisson's
// "<client id>:<owner or thread id>", a read-write writer's with ":write".
var ownerField = regexp.MustCompile(`^.+:[0-9]+(:write)?$`)

// looksLikeLock reports whether sampled hash fields are those of a dlock or
// Redisson lock: owner fields and, for read-write locks, "mode".
func looksLikeLock(fields []string) bool {
	owners := 0
	for _, f := range fields {
		switch {
		case f == "mode":
		case ownerField.MatchString(f):
			owners++
		default:
			return false
		}
	}
	return owners > 0
}

// nameFromCompanion returns the lock name of a companion key
// (keys.Companion): "prefix:{name}" or "prefix:{tag}:name".
func nameFromCompanion(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+":")
	if !ok || !strings.HasPrefix(rest, "{") {
		return "", false
	}
	if i := strings.Index(rest, "}:"); i > 0 {
		name := rest[i+2:]
		return name, keys.Validate(name) == nil && keys.Companion(prefix, name) == key
	}
	if !strings.HasSuffix(rest, "}") || len(rest) < 3 {
		return "", false
	}
	name := rest[1 : len(rest)-1]
	return name, keys.Validate(name) == nil && keys.Companion(prefix, name) == key
}

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

// masters calls fn for every master node: the Cluster's masters, or the one
// server (a Sentinel client talks to the current master).
func masters(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return errors.New("dashboard: unsupported Redis client")
}

// discover finds the locks dlock knows of: hashes whose fields look like lock
// owners (SCAN TYPE hash, then HRANDFIELD per hash, pipelined per page), and
// names with a fencing counter (SCAN MATCH dlock:fence:*). It stops scanning
// once it has found limit names.
func discover(ctx context.Context, rdb redis.UniversalClient, limit int) (found, error) {
	f := found{held: map[string]bool{}, seen: map[string]bool{}}
	var mu sync.Mutex
	full := func() bool { return len(f.seen) >= limit }
	err := masters(ctx, rdb, func(ctx context.Context, node *redis.Client) error {
		var cursor uint64
		for {
			ks, next, err := node.ScanType(ctx, cursor, "", scanCount, "hash").Result()
			if err != nil {
				return err
			}
			var cmds []*redis.StringSliceCmd
			if len(ks) > 0 {
				p := node.Pipeline()
				for _, k := range ks {
					cmds = append(cmds, p.HRandField(ctx, k, probeFields))
				}
				if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
					return err
				}
			}
			mu.Lock()
			f.cost.Scans++
			f.cost.Keys += len(ks)
			f.cost.Probes += len(ks)
			for i, k := range ks {
				if keys.Validate(k) == nil && looksLikeLock(cmds[i].Val()) {
					f.held[k] = true
					f.seen[k] = true
				}
			}
			stop := full()
			mu.Unlock()
			if next == 0 || stop {
				break
			}
			cursor = next
		}
		cursor = 0
		for {
			ks, next, err := node.ScanType(ctx, cursor, "dlock:fence:*", scanCount, "string").Result()
			if err != nil {
				return err
			}
			mu.Lock()
			f.cost.Scans++
			f.cost.Keys += len(ks)
			for _, k := range ks {
				if n, ok := nameFromCompanion("dlock:fence", k); ok && !full() {
					f.seen[n] = true
				}
			}
			stop := full()
			mu.Unlock()
			if next == 0 || stop {
				return nil
			}
			cursor = next
		}
	})
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
