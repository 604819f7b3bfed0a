// Package discover finds, with SCAN in pages (never KEYS), the locks,
// elections, semaphores and count-down latches dlock knows of in a Redis: the library's
// Client.Locks and the CLI's dashboard share it.
//
// Locks are hashes whose fields look like lock owners ("<client id>:<n>",
// "...:write", and "mode" for read-write locks), found by SCAN TYPE hash and
// a sample of each hash's fields (HRANDFIELD, pipelined per page), but for
// dlock's own hashes (the records of long holds), and, on request
// (Options.History), the names that only have a fencing counter left (SCAN
// MATCH dlock:fence:*).
// Elections are the hashes and counters of names under keys.ElectionPrefix;
// semaphores the sorted sets under keys.SemaphorePrefix; latches the
// markers under keys.LatchPrefix that dlock's TrySetCount sets beside a
// latch's count (a latch Redisson armed has none and is not found).
package discover

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

// ScanCount is the COUNT hint of every SCAN.
const ScanCount = 1000

// ProbeFields is how many fields of a hash are sampled (HRANDFIELD) to
// decide whether it is a lock.
const ProbeFields = 5

// ownerField matches a lock hash's owner field: dlock's and Redisson's
// "<client id>:<owner or thread id>", a read-write writer's with ":write".
var ownerField = regexp.MustCompile(`^.+:[0-9]+(:write)?$`)

// LooksLikeLock reports whether sampled hash fields are those of a dlock or
// Redisson lock: owner fields and, for read-write locks, "mode" (and an
// election's "leader").
func LooksLikeLock(fields []string) bool {
	owners := 0
	for _, f := range fields {
		switch {
		case f == "mode" || f == keys.LeaderField:
		case ownerField.MatchString(f):
			owners++
		default:
			return false
		}
	}
	return owners > 0
}

// Options say what to look for.
type Options struct {
	// Match, when not "", keeps only names matching this Redis glob
	// pattern (see Pattern; at most MaxPatternLen bytes). A name longer
	// than keys.MaxNameLen, which no dlock handle takes, matches no
	// pattern.
	Match string
	// Limit stops the scans once this many names were found (0: no limit).
	Limit int
	// Semaphores adds a SCAN TYPE zset for semaphores.
	Semaphores bool
	// Latches adds a SCAN TYPE string for the markers of latches.
	Latches bool
	// History adds the names that only have a fencing counter left: locks
	// and elections used within the counter's TTL (24 h by default) that
	// nobody holds now.
	History bool
	// Space is the namespace searched: only its keys are scanned, and names
	// are reported without it.
	Space keys.Space
	// Abandon, when not nil, is the caller's context for a Run that runs
	// on a context of its own (as under wire.Go, which outlives the
	// caller): once Abandon ends, Run stops before its next SCAN and
	// returns Abandon's cause, instead of scanning on for nobody.
	Abandon context.Context
}

// Cost counts the Redis commands of one discovery.
type Cost struct {
	Scans  int // SCAN calls
	Probes int // HRANDFIELD calls
	Keys   int // keys the scans returned
}

// Found is one discovery's result: names, not their state.
type Found struct {
	Held       map[string]bool // lock names whose hash exists
	Locks      map[string]bool // every lock name: held, and with History those with a fencing counter
	Elections  map[string]bool // election names: with a lock hash, and with History a counter
	Semaphores map[string]bool // semaphore names with permits held
	Latches    map[string]bool // names of latches dlock armed (with a marker alive)
	Cost       Cost
}

func (f *Found) size() int {
	return len(f.Locks) + len(f.Elections) + len(f.Semaphores) + len(f.Latches)
}

// Masters calls fn for every master node: the Cluster's masters, or the one
// server (a Sentinel client talks to the current master).
func Masters(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return errors.New("discover: unsupported Redis client")
}

// Run scans every master of rdb. It stops when ctx or o.Abandon ends,
// between SCAN calls. A Match over MaxPatternLen is an error before any
// call.
func Run(ctx context.Context, rdb redis.UniversalClient, o Options) (Found, error) {
	r := &run{o: o, f: Found{Held: map[string]bool{}, Locks: map[string]bool{}, Elections: map[string]bool{},
		Semaphores: map[string]bool{}, Latches: map[string]bool{}}}
	if o.Match != "" {
		g, err := Compile(o.Match)
		if err != nil {
			return r.f, err
		}
		r.match = g
	}
	if o.Abandon != nil {
		if o.Abandon.Err() != nil {
			return r.f, context.Cause(o.Abandon)
		}
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(o.Abandon, func() { cancel(context.Cause(o.Abandon)) })()
	}
	err := Masters(ctx, rdb, func(ctx context.Context, node *redis.Client) error {
		if err := scan(ctx, node, globPrefix(o.Space.Prefix()), "hash", func(ks []string) (bool, error) { return r.hashes(ctx, node, ks) }); err != nil {
			return err
		}
		if o.History {
			if err := scan(ctx, node, globPrefix(o.Space.Prefix()+"dlock:fence:"), "string", r.fences); err != nil {
				return err
			}
		}
		if o.Semaphores {
			if err := scan(ctx, node, globPrefix(o.Space.Prefix()+keys.SemaphorePrefix+":"), "zset", r.named(keys.SemaphorePrefix, r.f.Semaphores)); err != nil {
				return err
			}
		}
		if o.Latches {
			return scan(ctx, node, globPrefix(o.Space.Prefix()+keys.LatchPrefix+":"), "string", r.named(keys.LatchPrefix, r.f.Latches))
		}
		return nil
	})
	// Held names first: a lock seen by both scans is held.
	return r.f, err
}

// run is one Run: what it found so far, shared by the masters' scans.
type run struct {
	o     Options
	match *Pattern // o.Match compiled; nil for every name
	mu    sync.Mutex
	f     Found
}

func (r *run) full() bool { return r.o.Limit > 0 && r.f.size() >= r.o.Limit }

func (r *run) want(name string) bool {
	return r.match == nil || (len(name) <= keys.MaxNameLen && r.match.Match(name))
}

// addLock files a lock name (its key without the namespace): an election's
// lock under its election name. The caller holds r.mu.
func (r *run) addLock(k string, held bool) {
	if r.full() {
		return
	}
	if e, ok := keys.NameFromCompanion(keys.ElectionPrefix, k); ok {
		if r.want(e) {
			r.f.Elections[e] = true
		}
		return
	}
	if keys.Validate(k) != nil || !r.want(k) {
		return
	}
	r.f.Locks[k] = true
	if held {
		r.f.Held[k] = true
	}
}

// hashes probes a page of hashes for lock fields (HRANDFIELD, pipelined).
func (r *run) hashes(ctx context.Context, node *redis.Client, ks []string) (bool, error) {
	var cmds []*redis.StringSliceCmd
	if len(ks) > 0 {
		p := node.Pipeline()
		for _, k := range ks {
			cmds = append(cmds, p.HRandField(ctx, k, ProbeFields))
		}
		_, _ = p.Exec(ctx)
		// A key that is no longer a hash (a neighbour's, turned into a
		// string since the SCAN) is not a lock: only other errors fail.
		for _, c := range cmds {
			if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) && !strings.HasPrefix(err.Error(), "WRONGTYPE") {
				return false, err
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.f.Cost.Scans++
	r.f.Cost.Keys += len(ks)
	r.f.Cost.Probes += len(ks)
	for i, k := range ks {
		if n, ok := r.o.Space.Name(k); ok && !ownHash(n) && LooksLikeLock(cmds[i].Val()) {
			r.addLock(n, true)
		}
	}
	return r.full(), nil
}

// ownHash reports whether the hash at key (without the namespace) is one of
// dlock's own beside a lock: a record of long holds, whose fields are the
// lock's owners (keys.Held), so that LooksLikeLock cannot tell it from one.
func ownHash(key string) bool {
	_, ok := keys.NameFromCompanion(keys.HeldPrefix, key)
	return ok
}

// fences files the names of a page of fencing counters.
func (r *run) fences(ks []string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.f.Cost.Scans++
	r.f.Cost.Keys += len(ks)
	for _, k := range ks {
		if n, ok := r.o.Space.NameFromCompanion("dlock:fence", k); ok {
			r.addLock(n, false)
		}
	}
	return r.full(), nil
}

// named returns the page function that files, in into, the names of a
// page of companion keys under prefix: semaphores' permit sets, latches'
// markers.
func (r *run) named(prefix string, into map[string]bool) func([]string) (bool, error) {
	return func(ks []string) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.f.Cost.Scans++
		r.f.Cost.Keys += len(ks)
		for _, k := range ks {
			if n, ok := r.o.Space.NameFromCompanion(prefix, k); ok && r.want(n) && !r.full() {
				into[n] = true
			}
		}
		return r.full(), nil
	}
}

// scan pages through SCAN MATCH match TYPE typ, calling page with each
// page's keys until it reports stop or the scan ends.
func scan(ctx context.Context, node *redis.Client, match, typ string, page func([]string) (bool, error)) error {
	var cursor uint64
	for {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		ks, next, err := node.ScanType(ctx, cursor, match, ScanCount, typ).Result()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx) // why the call was cut short
			}
			return err
		}
		stop, err := page(ks)
		if err != nil || stop || next == 0 {
			return err
		}
		cursor = next
	}
}

// globPrefix is the SCAN MATCH pattern of the keys that begin with prefix
// ("" for every key), its glob characters escaped.
func globPrefix(prefix string) string {
	if prefix == "" {
		return ""
	}
	var b strings.Builder
	for _, r := range prefix {
		if strings.ContainsRune(`*?[]\\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String() + "*"
}
