package wire

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Cluster's calls are batched per master: each master's calls have a
// batcher of their own, with its own workers. A go-redis pipeline over a
// Cluster client waits for every node it sends to, so with one batcher for
// all nodes a master that does not answer (paused, partitioned) held both
// workers until go-redis's read timeout, and the calls for every other
// master waited behind it: renewals there failed, and holds on healthy
// masters were declared lost. Now such a master holds back only the calls
// for its own slots.
//
// Calls still go through the Cluster client (its hooks, its redirects);
// only the queue they wait in depends on the master that serves their
// first key's slot in the client's slot map. A call routed by a stale map
// is still sent right (go-redis and the wire follow the redirect), only in
// another master's batch.
//
// A master's batcher that has sent nothing for retireAfter is retired when
// another master's batcher is made (a new address: a failover promoted a
// replica, a node was replaced): its workers end, so a long-lived Client
// over a Cluster whose nodes come and go keeps two goroutines per master
// it uses, not per address it ever saw. A retired batcher stays in the
// map (a few hundred bytes per address) and starts again when a call is
// routed to it.
type nodes struct {
	cc *redis.ClusterClient
	// known is set once the client has answered a call without an error:
	// its slot map is loaded, and MasterForKey reads it without a round
	// trip. Until then every call goes through the Wire's first batcher.
	known   atomic.Bool
	mu      sync.Mutex // guards creation, revival and stopped
	by      sync.Map   // master address -> *batcher
	stopped bool
}

// batcherFor returns the batcher for cl's master, or w's first batcher.
func (n *nodes) batcherFor(w *Wire, cl *Call) *batcher {
	if !n.known.Load() {
		return &w.batch
	}
	key, ok := firstKey(cl.Cmd.Args())
	if !ok {
		return &w.batch
	}
	// A done context: were the map not loaded, MasterForKey would load it
	// on the caller's goroutine, bounded by go-redis's timeouts rather
	// than by the caller's ctx; this way it fails at once instead.
	master, err := n.cc.MasterForKey(doneCtx, key)
	if err != nil {
		return &w.batch
	}
	addr := master.Options().Addr
	if b, ok := n.by.Load(addr); ok && !b.(*batcher).retired.Load() {
		return b.(*batcher)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if b, ok := n.by.Load(addr); ok {
		b := b.(*batcher)
		if !n.stopped {
			b.revive()
		}
		return b
	}
	b := &batcher{}
	if n.stopped {
		b.w, b.stopped = w, true
	} else {
		b.start(w)
		n.retireIdle(time.Now().Add(-retireAfter))
	}
	n.by.Store(addr, b)
	return b
}

// retireAfter is how long a master's batcher must have sent nothing to be
// retired. A var for tests.
var retireAfter = time.Minute

// retireIdle retires every batcher that has sent nothing since idleSince.
// Called with mu held.
func (n *nodes) retireIdle(idleSince time.Time) {
	for _, b := range n.all() {
		b.retire(idleSince)
	}
}

// doneCtx is a context that is done.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// answered notes that the Cluster client answered cmd: when it succeeded,
// the slot map is loaded (go-redis never unloads it). A Redis error does
// not say so: loading the map may be what failed (CLUSTER SLOTS refused
// by an ACL, a node still LOADING its data), and go-redis then sets that
// error on the command.
func (n *nodes) answered(cmd redis.Cmder) {
	if n.known.Load() {
		return
	}
	if cmd.Err() == nil {
		n.known.Store(true)
	}
}

// all returns every master's batcher.
func (n *nodes) all() []*batcher {
	var bs []*batcher
	n.by.Range(func(_, b any) bool {
		bs = append(bs, b.(*batcher))
		return true
	})
	return bs
}

// stop stops every master's batcher, and those made later.
func (n *nodes) stop() {
	n.mu.Lock()
	n.stopped = true
	n.mu.Unlock()
	for _, b := range n.all() {
		b.stop()
	}
}

// firstKey returns the first key of a command the wire sends: a script's
// first key, or the first argument of any other command.
func firstKey(args []any) (string, bool) {
	if len(args) < 2 {
		return "", false
	}
	name, _ := args[0].(string)
	i := 1
	if len(name) >= 4 && strings.EqualFold(name[:4], "eval") {
		if len(args) < 4 || !positive(args[2]) {
			return "", false
		}
		i = 3
	}
	switch k := args[i].(type) {
	case string:
		return k, true
	case []byte:
		return string(k), true
	}
	return "", false
}

// positive reports whether a script's key count is above zero.
func positive(v any) bool {
	switch n := v.(type) {
	case int:
		return n > 0
	case int64:
		return n > 0
	case string:
		k, err := strconv.Atoi(n)
		return err == nil && k > 0
	}
	return false
}
