package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ClusterSlots is the number of Redis Cluster hash slots. A constant; safe
// for concurrent use.
const ClusterSlots = 16384

// DefaultClusterMasters is the number of masters StartCluster and
// StartClusterServer start when asked for 0. A constant; safe for
// concurrent use.
const DefaultClusterMasters = 3

// clusterNodeTimeout is the nodes' --cluster-node-timeout.
const clusterNodeTimeout = 2000 * time.Millisecond

// clusterBusAttempts is how many fresh cluster bus ports one node start
// tries: the bus port is chosen before the server starts, so it can be
// taken by the time the server binds it.
const clusterBusAttempts = 5

// Cluster is a Redis Cluster of masters only (no replicas) started by this
// package: one redis-server per master, each like StartRedisServer's (own
// temp directory, persistence off) plus --cluster-enabled yes, its
// nodes.conf in its own data directory, --cluster-node-timeout 2000 and a
// cluster bus port of its own (--cluster-port). The 16384 slots are split
// evenly, in order: node 0 has the lowest slots. The layout never changes
// (there is no resharding and no failover).
//
// All methods are safe for concurrent use. The nodes are ordinary *Redis
// values: CommandStats, Info, Do and Pause/Resume work on each; Kill and
// Restart do too, but a restarted node comes back empty and without its
// cluster configuration, i.e. no longer part of the cluster.
type Cluster struct {
	nodes  []*Redis
	ranges [][2]int // ranges[i]: the first and last slot of nodes[i]

	mu       sync.Mutex
	replicas []*Redis // joined by AddReplica
}

// StartClusterServer starts masters redis-server processes
// (DefaultClusterMasters when masters is 0) with cfg (whose Args come after
// the cluster arguments, so they can override them), assigns the slots,
// joins the nodes with CLUSTER MEET and returns once every node reports
// cluster_state:ok, knows every node with a connected bus link, and maps
// every slot to the right node. It uses no redis-cli. On error every node
// started is stopped; otherwise the caller must call Stop. Safe for
// concurrent use.
func StartClusterServer(masters int, cfg RedisConfig) (*Cluster, error) {
	if masters == 0 {
		masters = DefaultClusterMasters
	}
	if masters < 0 || masters > ClusterSlots {
		return nil, fmt.Errorf("testenv: a cluster of %d masters", masters)
	}
	c := &Cluster{}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()
	for i := 0; i < masters; i++ {
		r, err := startClusterNode(cfg)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, r)
		lo, hi := i*ClusterSlots/masters, (i+1)*ClusterSlots/masters-1
		c.ranges = append(c.ranges, [2]int{lo, hi})
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := c.create(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// startClusterNode starts one cluster-enabled server, retrying with another
// bus port when the chosen one was taken meanwhile.
func startClusterNode(cfg RedisConfig) (*Redis, error) {
	var lastErr error
	for attempt := 0; attempt < clusterBusAttempts; attempt++ {
		bus, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		node := cfg
		node.Args = append([]string{
			"--cluster-enabled", "yes",
			// Relative to --dir: the node's own data directory, which is
			// removed with it.
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10),
			// Without it a node that met nobody (a one-node cluster) does
			// not know its own address and reports an empty host.
			"--cluster-announce-ip", "127.0.0.1",
			// The default bus port, port+10000, does not exist for the
			// ephemeral ports freePort hands out.
			"--cluster-port", strconv.Itoa(bus),
		}, cfg.Args...)
		r, err := StartRedisServer(node)
		if err == nil {
			return r, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "already in use") {
			break
		}
	}
	return nil, lastErr
}

// create assigns the slots, gives each node its own config epoch, has every
// node meet the first one, and waits until the cluster is ready.
func (c *Cluster) create(ctx context.Context) error {
	first := c.nodes[0]
	firstBus, err := clusterBusPort(ctx, first)
	if err != nil {
		return err
	}
	for i, r := range c.nodes {
		lo, hi := c.ranges[i][0], c.ranges[i][1]
		if _, err := rawDo(ctx, r.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fmt.Errorf("testenv: node %s: CLUSTER ADDSLOTSRANGE %d %d: %w", r.Addr(), lo, hi, err)
		}
		// Distinct epochs from the start, as redis-cli --cluster create
		// sets them: no epoch collision to resolve first.
		if _, err := rawDo(ctx, r.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("testenv: node %s: CLUSTER SET-CONFIG-EPOCH: %w", r.Addr(), err)
		}
	}
	host, port, _ := net.SplitHostPort(first.Addr())
	for _, r := range c.nodes[1:] {
		if _, err := rawDo(ctx, r.Addr(), "CLUSTER", "MEET", host, port, strconv.Itoa(firstBus)); err != nil {
			return fmt.Errorf("testenv: node %s: CLUSTER MEET %s: %w", r.Addr(), first.Addr(), err)
		}
	}
	var notReady error // the last reason, not cut short by ctx
	err = waitFor(ctx, "cluster to be ready", func() (bool, error) {
		for _, r := range c.nodes {
			if err := c.nodeReady(ctx, r); err != nil {
				err = fmt.Errorf("node %s: %w", r.Addr(), err)
				if ctx.Err() == nil {
					notReady = err
				}
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		if notReady != nil {
			err = fmt.Errorf("%w; not ready because %v", err, notReady)
		}
		var logs strings.Builder
		for _, r := range c.nodes {
			fmt.Fprintf(&logs, "\n--- %s:\n%s", r.Addr(), r.Log())
		}
		return fmt.Errorf("%w%s", err, logs.String())
	}
	return nil
}

// clusterBusPort reads a node's --cluster-port.
func clusterBusPort(ctx context.Context, r *Redis) (int, error) {
	v, err := rawDo(ctx, r.Addr(), "CONFIG", "GET", "cluster-port")
	if err != nil {
		return 0, fmt.Errorf("testenv: node %s: CONFIG GET cluster-port: %w", r.Addr(), err)
	}
	arr, _ := v.([]any)
	if len(arr) == 2 {
		if s, ok := arr[1].(string); ok {
			if n, err := strconv.Atoi(s); err == nil && n > 0 {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("testenv: node %s: CONFIG GET cluster-port answered %v", r.Addr(), v)
}

// nodeReady checks one node's view of the cluster: state ok, every slot
// assigned, every node known with a connected bus link (PUBLISH travels
// over those links), and every slot range served by the node that was
// given it.
func (c *Cluster) nodeReady(ctx context.Context, r *Redis) error {
	for _, check := range []func(context.Context, *Redis) error{c.infoReady, c.linksReady, c.slotsReady} {
		if err := check(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// infoReady checks CLUSTER INFO: state ok, every slot assigned and served,
// every node known.
func (c *Cluster) infoReady(ctx context.Context, r *Redis) error {
	v, err := rawDo(ctx, r.Addr(), "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	s, err := replyString(v)
	if err != nil {
		return err
	}
	info := parseInfo(s)
	n := strconv.Itoa(len(c.nodes))
	for k, want := range map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(ClusterSlots),
		"cluster_slots_ok":       strconv.Itoa(ClusterSlots),
		"cluster_known_nodes":    n,
		"cluster_size":           n,
	} {
		if info[k] != want {
			return fmt.Errorf("%s is %q, want %q", k, info[k], want)
		}
	}
	return nil
}

// linksReady checks CLUSTER NODES: every node listed, none failing or in
// a handshake, every bus link connected.
func (c *Cluster) linksReady(ctx context.Context, r *Redis) error {
	v, err := rawDo(ctx, r.Addr(), "CLUSTER", "NODES")
	if err != nil {
		return err
	}
	s, err := replyString(v)
	if err != nil {
		return err
	}
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		// <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <epoch> <link-state> <slot> ...
		f := strings.Fields(line)
		if len(f) < 8 {
			return fmt.Errorf("malformed CLUSTER NODES line %q", line)
		}
		lines++
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "handshake", "fail", "fail?", "noaddr":
				return fmt.Errorf("node %s has flag %s", f[1], flag)
			}
		}
		if f[7] != "connected" {
			return fmt.Errorf("link to %s is %s", f[1], f[7])
		}
	}
	if lines != len(c.nodes) {
		return fmt.Errorf("CLUSTER NODES lists %d nodes, want %d", lines, len(c.nodes))
	}
	return nil
}

// slotsReady checks CLUSTER SLOTS: every slot range served by the node
// that was given it.
func (c *Cluster) slotsReady(ctx context.Context, r *Redis) error {
	v, err := rawDo(ctx, r.Addr(), "CLUSTER", "SLOTS")
	if err != nil {
		return err
	}
	got := make(map[[2]int]string)
	arr, _ := v.([]any)
	for _, e := range arr {
		sl, _ := e.([]any)
		if len(sl) < 3 {
			return fmt.Errorf("malformed CLUSTER SLOTS entry %v", e)
		}
		lo, _ := sl[0].(int64)
		hi, _ := sl[1].(int64)
		master, _ := sl[2].([]any)
		if len(master) < 2 {
			return fmt.Errorf("malformed CLUSTER SLOTS entry %v", e)
		}
		host, _ := master[0].(string)
		port, _ := master[1].(int64)
		got[[2]int{int(lo), int(hi)}] = net.JoinHostPort(host, strconv.FormatInt(port, 10))
	}
	for i, rg := range c.ranges {
		if a := got[rg]; a != c.nodes[i].Addr() {
			return fmt.Errorf("slots %d-%d served by %q, want %s", rg[0], rg[1], a, c.nodes[i].Addr())
		}
	}
	if len(got) != len(c.ranges) {
		return fmt.Errorf("CLUSTER SLOTS has %d ranges, want %d", len(got), len(c.ranges))
	}
	return nil
}

// Addrs returns the nodes' "127.0.0.1:PORT" addresses, in slot order (the
// first node has the lowest slots). The result is a fresh slice. Safe for
// concurrent use.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, r := range c.nodes {
		out[i] = r.Addr()
	}
	return out
}

// Nodes returns the nodes, in slot order, e.g. to read each one's
// CommandStats. The slice is fresh; the *Redis values are shared and safe
// for concurrent use. Safe for concurrent use.
func (c *Cluster) Nodes() []*Redis { return append([]*Redis(nil), c.nodes...) }

// SlotNode returns the node serving slot (0 to 16383), or nil for a slot
// out of range. It makes no network call: the layout never changes. Safe
// for concurrent use.
func (c *Cluster) SlotNode(slot int) *Redis {
	for i, rg := range c.ranges {
		if slot >= rg[0] && slot <= rg[1] {
			return c.nodes[i]
		}
	}
	return nil
}

// Stop stops every node (see Redis.Stop) and returns their errors joined.
// Idempotent. Safe for concurrent use.
func (c *Cluster) Stop() error {
	var errs []error
	for _, r := range c.nodes {
		if err := r.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("testenv: stop cluster node %s: %w", r.Addr(), err))
		}
	}
	return errors.Join(errs...)
}

// StartCluster starts a cluster like StartClusterServer with the default
// RedisConfig and stops it in t.Cleanup (logging each node's output first
// if the test failed). Any error is fatal. Startup takes a few seconds (a
// master waits 2s before declaring itself ok), so share one cluster among
// subtests. Must be called from the test's goroutine (it may call
// t.Fatal); the returned *Cluster is safe for concurrent use.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	c, err := StartClusterServer(masters, RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range c.nodes {
				t.Logf("testenv: cluster node %s output:\n%s", r.Addr(), r.Log())
			}
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// NewClient returns a go-redis cluster client (default options, every node
// as a seed, maintenance notifications off), closed in t.Cleanup. Call it
// from the test's goroutine; the client is safe for concurrent use.
func (c *Cluster) NewClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    c.Addrs(),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
