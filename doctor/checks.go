package doctor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// verdict is one node's outcome of a check.
type verdict struct {
	addr   string
	status Status
	detail string
}

// live returns the nodes that could be probed.
func (d *doctor) live() []*node {
	var out []*node
	for _, n := range d.nodes {
		if n.err == nil {
			out = append(out, n)
		}
	}
	return out
}

// perNode adds check name from f's verdict on every live node: outside a
// Cluster the one node's; on a Cluster the worst, naming the nodes.
func (d *doctor) perNode(name string, f func(n *node) (Status, string)) {
	var vs []verdict
	for _, n := range d.live() {
		s, detail := f(n)
		vs = append(vs, verdict{n.addr, s, detail})
	}
	d.combine(name, vs)
}

func (d *doctor) combine(name string, vs []verdict) {
	if len(vs) == 0 {
		d.add(name, Fail, "no master could be probed")
		return
	}
	if d.cluster == nil {
		d.add(name, vs[0].status, "%s", vs[0].detail)
		return
	}
	worst := OK
	for _, v := range vs {
		worst = max(worst, v.status)
	}
	same := true
	for _, v := range vs[1:] {
		same = same && v.status == vs[0].status && v.detail == vs[0].detail
	}
	if same {
		d.add(name, worst, "every master (%d): %s", len(vs), vs[0].detail)
		return
	}
	var parts []string
	for _, v := range vs {
		if v.status == worst {
			parts = append(parts, v.addr+": "+v.detail)
		}
	}
	d.add(name, worst, "%s", strings.Join(parts, "; "))
}

// parseVersion reads "major.minor.patch" (missing parts are 0).
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.SplitN(s, ".", 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, s != ""
}

// atLeast reports whether version v is at least min.
func atLeast(v, min string) bool {
	a, ok1 := parseVersion(v)
	b, _ := parseVersion(min)
	if !ok1 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}

func (d *doctor) checkVersion() {
	d.perNode(NameVersion, func(n *node) (Status, string) {
		name, v := n.server()
		if _, ok := parseVersion(v); !ok {
			if he := errText(n.helloErr); strings.HasPrefix(he, "ERR unknown command") || strings.HasPrefix(he, "ERR wrong number of arguments") {
				return Fail, fmt.Sprintf("HELLO without arguments is refused (%s), as by Redis before 6.2, and INFO gives no version (%s): dlock needs %s", short(n.helloErr), orNone(n.unreadable()), MinVersion)
			}
			return Warn, fmt.Sprintf("version unknown (HELLO: %s; %s): dlock needs Redis %s or later", orNone(errText(n.helloErr)), orNone(n.unreadable()), MinVersion)
		}
		if !atLeast(v, MinVersion) {
			return Fail, fmt.Sprintf("%s %s is below %s: dlock's scripts use SET ... GET and ZADD ... GT (6.2)", name, v, MinVersion)
		}
		return OK, fmt.Sprintf("%s %s (minimum %s)", name, v, MinVersion)
	})
}

func orNone(s string) string {
	if s == "" {
		return "no error"
	}
	return s
}

// sharded says whether every live node has sharded pub/sub.
func (d *doctor) sharded() bool {
	live := d.live()
	for _, n := range live {
		if _, v := n.server(); !atLeast(v, "7.0") {
			return false
		}
	}
	return len(live) > 0
}

func (d *doctor) checkMode(ctx context.Context) error {
	shard := "sharded pub/sub (SSUBSCRIBE) available"
	if !d.sharded() {
		shard = "no sharded pub/sub (Redis 7.0+)"
	}
	if d.cluster != nil {
		live := len(d.live())
		if !d.sharded() {
			shard += ": release messages are broadcast to every node"
		}
		d.add(NameMode, OK, "Cluster, %d masters (%d answering); %s", len(d.nodes), live, shard)
		return nil
	}
	n := d.nodes[0]
	mode := n.hello["mode"]
	if mode == "" && n.info != nil {
		mode = n.info["redis_mode"]
	}
	switch {
	case mode == "cluster":
		d.add(NameMode, Fail, "a Cluster node reached through a single-node client: keys of other slots answer MOVED; use a cluster client (redis.NewClusterClient; dlock --redis redis://host:port?addr=host2:port)")
		return nil
	case mode == "sentinel":
		d.add(NameMode, Fail, "a Sentinel, not a data node: use a failover client (redis.NewFailoverClient; dlock --redis redis://sentinel:26379?master_name=NAME)")
		return nil
	case n.role() == "replica":
		d.add(NameMode, Fail, "the node is a replica: dlock's writes fail with READONLY; connect to the master, or through Sentinel")
		return nil
	}
	counts, err := call(ctx, func(ctx context.Context) (map[string]int64, error) {
		return d.rdb.PubSubNumSub(ctx, "__sentinel__:hello").Result()
	})
	if err != nil && !isReply(err) {
		return d.lost(ctx, err)
	}
	n.sentinels = counts["__sentinel__:hello"]
	how := "standalone master"
	if c, ok := d.rdb.(*redis.Client); ok && c.Options().Addr == "FailoverClient" {
		how = "master reached through Sentinel (go-redis failover client)"
	}
	if n.sentinels > 0 {
		how += fmt.Sprintf(", managed by Sentinel (%d subscribed to __sentinel__:hello)", n.sentinels)
	}
	d.add(NameMode, OK, "%s; %s", how, shard)
	return nil
}

func (d *doctor) checkScripting() {
	d.perNode(NameScripting, func(n *node) (Status, string) {
		for _, c := range []struct {
			cmd string
			err error
		}{{"EVAL", n.evalErr}, {"EVALSHA", n.evalshaErr}} {
			switch {
			case c.err == nil:
			case denied(c.err):
				return Fail, fmt.Sprintf("%s denied for this user (%s): dlock runs every lock operation as a Lua script; allow +@scripting (at least +eval +evalsha)", c.cmd, short(c.err))
			case unknownCommand(c.err):
				return Fail, fmt.Sprintf("%s is disabled on this server (%s): dlock runs every lock operation as a Lua script", c.cmd, short(c.err))
			default:
				return Fail, fmt.Sprintf("%s of %q failed: %s", c.cmd, pingScript, short(c.err))
			}
		}
		return OK, "EVAL and EVALSHA allowed"
	})
}

// channels are the probe channels: one under the namespace, or one of
// each default prefix.
func (d *doctor) channels() []string {
	if d.opts.Namespace != "" {
		return []string{d.opts.prefix() + "doctor:" + d.id}
	}
	return []string{"dlock:doctor:" + d.id, "redisson_lock__channel:{dlock:doctor:" + d.id + "}"}
}

// checkPubSub subscribes to the probe channels, publishes one message on
// each, waits for them and unsubscribes.
func (d *doctor) checkPubSub(ctx context.Context) error {
	chans := d.channels()
	sub := &probeSub{ps: d.rdb.Subscribe(ctx)} // no channel yet: no connection
	defer sub.close()
	what := strings.Join(chans, ", ")
	err := sub.do(ctx, func(ctx context.Context) error { return subscribeAll(ctx, sub.ps, chans) })
	switch {
	case ctx.Err() != nil:
		return d.lost(ctx, err)
	case denied(err):
		d.add(NamePubSub, Fail, "SUBSCRIBE %s denied for this user (%s): waiters could not hear releases; allow the channels (&%s*)", what, short(err), d.allowedPrefix())
		return nil
	case err != nil && (isReply(err) || d.cluster != nil):
		// On a Cluster, a node down is the cluster check's to report.
		d.add(NamePubSub, Fail, "SUBSCRIBE %s: %s", what, short(err))
		return nil
	case err != nil:
		return d.lost(ctx, err)
	}
	if done, err := d.publishAll(ctx, chans); done {
		return err
	}
	got := map[string]bool{}
	err = sub.do(ctx, func(ctx context.Context) error {
		for len(got) < len(chans) {
			msg, err := sub.ps.ReceiveTimeout(ctx, deliveryTimeout)
			if err != nil {
				return err
			}
			if m, ok := msg.(*redis.Message); ok {
				got[m.Channel] = true
			}
		}
		return sub.ps.Unsubscribe(ctx, chans...)
	})
	switch {
	case ctx.Err() != nil:
		return d.lost(ctx, err)
	case err != nil:
		d.add(NamePubSub, Warn, "SUBSCRIBE and PUBLISH allowed on %s, but the messages did not come back within %v: %s", what, deliveryTimeout, short(err))
		return nil
	}
	d.add(NamePubSub, OK, "SUBSCRIBE, PUBLISH and UNSUBSCRIBE allowed on %s; messages delivered", what)
	return nil
}

// probeSub is the pub/sub check's subscription.
type probeSub struct{ ps *redis.PubSub }

// do runs f on the subscription; when ctx ends first, the subscription is
// closed in the background (which ends f's read) and ctx's cause returned.
func (s *probeSub) do(ctx context.Context, f func(ctx context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		p := s.ps
		go func() { _ = p.Close(); <-done }()
		s.ps = nil
		return context.Cause(ctx)
	}
}

func (s *probeSub) close() {
	if s.ps != nil {
		_ = s.ps.Close()
	}
}

// subscribeAll subscribes chans and waits for every confirmation.
func subscribeAll(ctx context.Context, ps *redis.PubSub, chans []string) error {
	if err := ps.Subscribe(ctx, chans...); err != nil {
		return err
	}
	for range chans {
		msg, err := ps.Receive(ctx)
		if err != nil {
			return err
		}
		if s, ok := msg.(*redis.Subscription); !ok || s.Kind != "subscribe" {
			return fmt.Errorf("unexpected reply %v", msg)
		}
	}
	return nil
}

// publishAll publishes a probe on each channel; done reports that the
// check is decided (a failure added, or contact lost: err).
func (d *doctor) publishAll(ctx context.Context, chans []string) (done bool, err error) {
	for _, ch := range chans {
		_, err := call(ctx, func(ctx context.Context) (int64, error) { return d.rdb.Publish(ctx, ch, "dlock doctor").Result() })
		switch {
		case denied(err):
			d.add(NamePubSub, Fail, "PUBLISH %s denied for this user (%s): releases could not wake waiters, who would wait up to a lock's TTL; allow the channels (&%s*)", ch, short(err), d.allowedPrefix())
			return true, nil
		case ctx.Err() != nil:
			return true, d.lost(ctx, err)
		case err != nil && (isReply(err) || d.cluster != nil):
			d.add(NamePubSub, Fail, "PUBLISH %s: %s", ch, short(err))
			return true, nil
		case err != nil:
			return true, d.lost(ctx, err)
		}
	}
	return false, nil
}

// allowedPrefix is the ACL pattern prefix the layout needs.
func (d *doctor) allowedPrefix() string {
	if d.opts.Namespace != "" {
		return d.opts.prefix()
	}
	return "dlock:* &redisson_lock__channel:"
}

// keyResult is the outcome of the probe key's SET, WAIT and DEL on a node.
type keyResult struct {
	key             string
	setErr, delErr  error
	waitErr         error
	acks            int64 // replicas that acknowledged the SET; -1: WAIT not sent
	noKey           error // no key of this node's slots could be found
	unreachableNode bool
}

// checkKeys writes, and at once deletes, a probe key with a TTL on every
// master (with WAIT after the write when ReplicaAck is set) and adds the
// keys check; it returns each node's outcome for the replicas check.
func (d *doctor) checkKeys(ctx context.Context) (map[*node]keyResult, error) {
	out := map[*node]keyResult{}
	for _, n := range d.live() {
		var c cmdable = d.rdb
		key := d.opts.prefix() + "doctor:" + d.id
		if d.cluster != nil {
			var err error
			c, key, err = d.keyOn(ctx, n)
			if ctx.Err() != nil {
				return nil, d.lost(ctx, err)
			}
			if err != nil {
				out[n] = keyResult{noKey: err, acks: -1}
				continue
			}
		}
		r, err := d.writeProbe(ctx, c, key)
		if err != nil {
			if d.cluster == nil || ctx.Err() != nil {
				return nil, d.lost(ctx, err)
			}
			out[n] = keyResult{key: key, unreachableNode: true, setErr: err, acks: -1}
			continue
		}
		out[n] = r
	}
	d.perNode(NameKeys, func(n *node) (Status, string) {
		r := out[n]
		switch {
		case r.noKey != nil:
			return Warn, "not tested: " + short(r.noKey)
		case r.unreachableNode:
			return Fail, fmt.Sprintf("SET %s: %s", r.key, short(r.setErr))
		case denied(r.setErr):
			return Fail, fmt.Sprintf("SET %s denied for this user (%s): allow the keys (~%s*)", r.key, short(r.setErr), d.keyPattern())
		case r.setErr != nil:
			return Fail, fmt.Sprintf("SET %s PX %d refused: %s", r.key, probeTTL.Milliseconds(), short(r.setErr))
		case denied(r.delErr):
			return Fail, fmt.Sprintf("DEL %s denied for this user (%s): dlock deletes lock keys on release", r.key, short(r.delErr))
		case r.delErr != nil:
			return Fail, fmt.Sprintf("DEL %s: %s", r.key, short(r.delErr))
		}
		note := ""
		if d.opts.Namespace == "" {
			note = "; lock keys are the lock names themselves, which the ACL must allow too"
		}
		return OK, fmt.Sprintf("SET with a TTL and DEL allowed on a probe key (%sdoctor:*)%s", d.opts.prefix(), note)
	})
	return out, nil
}

// keyPattern is the key pattern the layout needs, for messages.
func (d *doctor) keyPattern() string {
	if d.opts.Namespace != "" {
		return d.opts.prefix()
	}
	return "dlock:"
}

// keyOn finds a probe key served by the Cluster master n, and n's client.
func (d *doctor) keyOn(ctx context.Context, n *node) (cmdable, string, error) {
	for i := 0; i < 64*len(d.nodes)+64; i++ {
		key := d.opts.prefix() + "doctor:{" + d.id + "." + strconv.Itoa(i) + "}"
		c, err := call(ctx, func(ctx context.Context) (*redis.Client, error) { return d.cluster.MasterForKey(ctx, key) })
		if err != nil {
			return nil, "", err
		}
		if c.Options().Addr == n.addr {
			return c, key, nil
		}
	}
	return nil, "", fmt.Errorf("no probe key found in the slots of %s", n.addr)
}

// writeProbe sends SET key PX, WAIT (with ReplicaAck) and DEL in one
// pipeline: one connection, so WAIT counts the SET. The error is a
// network or ctx error; replies are in the result.
func (d *doctor) writeProbe(ctx context.Context, c cmdable, key string) (keyResult, error) {
	r := keyResult{key: key, acks: -1}
	return call(ctx, func(ctx context.Context) (keyResult, error) {
		var set *redis.StatusCmd
		var wait *redis.Cmd
		var del *redis.IntCmd
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			set = p.Set(ctx, key, "dlock doctor probe", probeTTL)
			if d.opts.ReplicaAck > 0 {
				// In whole milliseconds, rounded up: WAIT N 0 blocks for ever.
				ms := (d.opts.ReplicaTimeout + time.Millisecond - 1) / time.Millisecond
				wait = p.Do(ctx, "wait", d.opts.ReplicaAck, int64(ms))
			}
			del = p.Del(ctx, key)
			return nil
		})
		for _, err := range []error{set.Err(), del.Err()} {
			if err != nil && !isReply(err) {
				return r, err
			}
		}
		r.setErr, r.delErr = set.Err(), del.Err()
		if wait != nil {
			if err := wait.Err(); err != nil && !isReply(err) {
				return r, err
			}
			r.acks, r.waitErr = 0, wait.Err()
			if r.waitErr == nil {
				r.acks, _ = wait.Int64()
			}
		}
		return r, nil
	})
}

func (d *doctor) checkEviction() {
	d.perNode(NameEviction, func(n *node) (Status, string) {
		mm, pol, ok := n.memory()
		switch {
		case !ok:
			return Warn, fmt.Sprintf("maxmemory and maxmemory-policy unreadable (%s): make sure maxmemory is 0 or the policy is noeviction, or held locks can be evicted", n.unreadable())
		case mm == 0:
			return OK, fmt.Sprintf("no maxmemory: nothing is evicted (policy %s)", pol)
		case pol != "noeviction":
			return Fail, fmt.Sprintf("maxmemory %d bytes with maxmemory-policy %s: a full Redis evicts keys, held locks among them (lock keys carry TTLs, so volatile-* policies evict them too), and an evicted lock is granted again while its holder runs: two holders; set maxmemory-policy noeviction", mm, pol)
		}
		return OK, fmt.Sprintf("maxmemory %d bytes with noeviction: a full Redis refuses new grants (OOM) instead of evicting held locks", mm)
	})
}

// restartWarning is the persistence check's warning.
const restartWarning = "a restart empties every lock: a second holder can be granted while the first still runs, until its next renewal reports ErrDataLost; fencing tokens stay ordered across the restart (a new fencing counter starts from the server clock in microseconds, above every earlier token) unless the server clock went back"

func (d *doctor) checkPersistence() {
	d.perNode(NamePersistence, func(n *node) (Status, string) {
		aof, aofOK := n.aof()
		save, saveOK := n.save()
		switch {
		case aofOK && aof:
			return OK, "AOF on: a restart keeps the locks (a crash loses the writes since the last fsync)"
		case saveOK && save != "":
			return OK, fmt.Sprintf("RDB snapshots (save %s), AOF off: a crash loses the locks granted since the last snapshot", save)
		case aofOK && saveOK:
			return Warn, "persistence off (no RDB save points, appendonly no): " + restartWarning
		case aofOK:
			return Warn, fmt.Sprintf("AOF off and RDB save points unreadable (%s): if snapshots are off too, %s", n.unreadable(), restartWarning)
		}
		return Warn, fmt.Sprintf("persistence unreadable (%s): if it is off, %s", n.unreadable(), restartWarning)
	})
}

func (d *doctor) checkReplicas(keys map[*node]keyResult) {
	want := d.opts.ReplicaAck
	d.perNode(NameReplicas, func(n *node) (Status, string) {
		connected := "unknown (INFO not readable)"
		if n.info != nil {
			connected = n.info["connected_slaves"]
		}
		if want == 0 {
			return OK, fmt.Sprintf("connected replicas: %s; WithReplicaAck not requested", connected)
		}
		r := keys[n]
		switch {
		case r.acks < 0:
			return Warn, fmt.Sprintf("WithReplicaAck(%d) not tested: the probe key could not be written (connected replicas: %s)", want, connected)
		case denied(r.waitErr):
			return Fail, fmt.Sprintf("WAIT denied for this user (%s): WithReplicaAck(%d) needs it", short(r.waitErr), want)
		case r.waitErr != nil:
			return Fail, fmt.Sprintf("WAIT: %s", short(r.waitErr))
		case r.acks < int64(want):
			return Fail, fmt.Sprintf("%d of %d replicas acknowledged a write within %v (connected replicas: %s): WithReplicaAck(%d, %v) would refuse grants with ErrNotReplicated", r.acks, want, d.opts.ReplicaTimeout, connected, want, d.opts.ReplicaTimeout)
		}
		return OK, fmt.Sprintf("%d replicas acknowledged a write within %v (connected replicas: %s): WithReplicaAck(%d) can be met", r.acks, d.opts.ReplicaTimeout, connected, want)
	})
}

func (d *doctor) checkCluster() {
	var down []string
	for _, n := range d.nodes {
		if n.err != nil {
			down = append(down, n.addr+": "+short(n.err))
		}
	}
	if len(down) > 0 || len(d.nodes) == 0 {
		d.add(NameCluster, Fail, "%d of %d masters unreachable: %s; locks in their slots can be neither taken nor released", len(down), len(d.nodes), strings.Join(down, "; "))
		return
	}
	d.add(NameCluster, OK, "all %d masters answer", len(d.nodes))
}
