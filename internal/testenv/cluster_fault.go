package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// This file changes a running Cluster's layout for fault tests: a replica
// for a master, a slot migration, a manual failover. After any of them,
// Cluster.SlotNode and the ranges it reports describe the layout the cluster
// was started with; ask the servers (SlotOwner) instead.

// NodeID returns a cluster node's id (CLUSTER MYID). Safe for concurrent
// use.
func NodeID(ctx context.Context, r *Redis) (string, error) {
	v, err := rawDo(ctx, r.Addr(), "CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("testenv: node %s: CLUSTER MYID: %w", r.Addr(), err)
	}
	return replyString(v)
}

// KeySlot returns the cluster slot of key as node r computes it (CLUSTER
// KEYSLOT). Safe for concurrent use.
func KeySlot(ctx context.Context, r *Redis, key string) (int, error) {
	v, err := rawDo(ctx, r.Addr(), "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return 0, fmt.Errorf("testenv: CLUSTER KEYSLOT %s: %w", key, err)
	}
	n, _ := v.(int64)
	return int(n), nil
}

// SlotOwner returns the address of the master that serves slot, as node r
// sees it now (CLUSTER SLOTS). Safe for concurrent use.
func SlotOwner(ctx context.Context, r *Redis, slot int) (string, error) {
	v, err := rawDo(ctx, r.Addr(), "CLUSTER", "SLOTS")
	if err != nil {
		return "", fmt.Errorf("testenv: node %s: CLUSTER SLOTS: %w", r.Addr(), err)
	}
	arr, _ := v.([]any)
	for _, e := range arr {
		sl, _ := e.([]any)
		if len(sl) < 3 {
			continue
		}
		lo, _ := sl[0].(int64)
		hi, _ := sl[1].(int64)
		if int64(slot) < lo || int64(slot) > hi {
			continue
		}
		m, _ := sl[2].([]any)
		if len(m) < 2 {
			break
		}
		host, _ := m[0].(string)
		port, _ := m[1].(int64)
		return net.JoinHostPort(host, strconv.FormatInt(port, 10)), nil
	}
	return "", fmt.Errorf("testenv: node %s: slot %d has no owner", r.Addr(), slot)
}

// AddReplica starts a cluster-enabled redis-server, joins it to the cluster
// and makes it a replica of master (CLUSTER REPLICATE), returning once its
// replication link is up and every node knows it as master's replica (the
// masters and the replicas added before). It is stopped in t.Cleanup. Call it once per
// replica wanted, from the test's goroutine.
func (c *Cluster) AddReplica(t testing.TB, master *Redis) *Redis {
	t.Helper()
	r, err := startClusterNode(RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: cluster replica %s output:\n%s", r.Addr(), r.Log())
		}
		if err := r.Stop(); err != nil {
			t.Errorf("testenv: stop cluster replica %s: %v", r.Addr(), err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := c.addReplica(ctx, r, master); err != nil {
		t.Fatalf("%v\n%s", err, r.Log())
	}
	return r
}

// StartReplica is AddReplica without a testing.TB, for programs (the
// benchmark): it starts a cluster-enabled redis-server with cfg, makes it a
// replica of master and returns once its replication link is up and every
// node knows it. On error the server is stopped; otherwise the caller must
// call its Stop (Cluster.Stop does not). Call it once per replica wanted,
// one at a time.
func (c *Cluster) StartReplica(master *Redis, cfg RedisConfig) (*Redis, error) {
	r, err := startClusterNode(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := c.addReplica(ctx, r, master); err != nil {
		_ = r.Stop()
		return nil, fmt.Errorf("%w\n%s", err, r.Log())
	}
	return r, nil
}

func (c *Cluster) addReplica(ctx context.Context, r, master *Redis) error {
	host, port, _ := net.SplitHostPort(master.Addr())
	bus, err := clusterBusPort(ctx, master)
	if err != nil {
		return err
	}
	if _, err := rawDo(ctx, r.Addr(), "CLUSTER", "MEET", host, port, strconv.Itoa(bus)); err != nil {
		return fmt.Errorf("testenv: CLUSTER MEET: %w", err)
	}
	id, err := NodeID(ctx, master)
	if err != nil {
		return err
	}
	// Every node but the new one already knows the earlier replicas.
	c.mu.Lock()
	others := append(append([]*Redis(nil), c.nodes...), c.replicas...)
	c.mu.Unlock()
	want := strconv.Itoa(len(others) + 1)
	err = waitFor(ctx, "the new node to know the cluster", func() (bool, error) {
		v, err := rawDo(ctx, r.Addr(), "CLUSTER", "INFO")
		if err != nil {
			return false, err
		}
		s, _ := v.(string)
		info := parseInfo(s)
		if info["cluster_known_nodes"] != want || info["cluster_state"] != "ok" {
			return false, fmt.Errorf("known nodes %s, state %s", info["cluster_known_nodes"], info["cluster_state"])
		}
		// REPLICATE needs the master known by id with its address.
		_, err = rawDo(ctx, r.Addr(), "CLUSTER", "REPLICATE", id)
		return err == nil, err
	})
	if err != nil {
		return err
	}
	return waitFor(ctx, "the replica's link and every node's view", func() (bool, error) {
		info, err := r.Info(ctx, "replication")
		if err != nil {
			return false, err
		}
		if info["master_link_status"] != "up" {
			return false, fmt.Errorf("master_link_status %q", info["master_link_status"])
		}
		for _, n := range others {
			v, err := rawDo(ctx, n.Addr(), "CLUSTER", "NODES")
			if err != nil {
				return false, err
			}
			s, _ := v.(string)
			if !knowsReplica(s, r.Addr(), id) {
				return false, fmt.Errorf("node %s does not know %s as a replica of %s yet", n.Addr(), r.Addr(), id)
			}
		}
		c.mu.Lock()
		c.replicas = append(c.replicas, r)
		c.mu.Unlock()
		return true, nil
	})
}

// knowsReplica says whether CLUSTER NODES output nodes lists addr as a
// replica of the master with id masterID. Until the master itself does, it
// does not copy sharded messages (SPUBLISH) to that replica over the bus.
func knowsReplica(nodes, addr, masterID string) bool {
	for _, line := range strings.Split(nodes, "\n") {
		// <id> <ip:port@cport> <flags> <master> ...
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[1], addr+"@") {
			continue
		}
		return strings.Contains(f[2], "slave") && f[3] == masterID
	}
	return false
}

// MigrateSlot moves slot from one master to another while clients keep
// using it, the way redis-cli --cluster reshard does: SETSLOT IMPORTING on
// the target, MIGRATING on the source, MIGRATE of its keys in batches, then
// SETSLOT NODE on both and on every other master. Clients meet ASK and
// TRYAGAIN during the move and MOVED after it. Safe for concurrent use, but
// not with another change of the same slot.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, from, to *Redis) error {
	order := []*Redis{to, from}
	for _, n := range c.nodes {
		if n != from && n != to {
			order = append(order, n)
		}
	}
	return c.migrate(ctx, slot, from, to, order, 0)
}

// MigrateSlotNodeOrder is MigrateSlot with the last step, SETSLOT NODE,
// sent to the nodes in the cluster's order rather than target first, gap
// apart: when the source comes first, for gap it sends clients to the
// target while the target, still importing, sends them back (MOVED both
// ways), as a reshard tool that does not order its calls does.
func (c *Cluster) MigrateSlotNodeOrder(ctx context.Context, slot int, from, to *Redis, gap time.Duration) error {
	return c.migrate(ctx, slot, from, to, c.nodes, gap)
}

// migrate moves slot from one master to another, ending with SETSLOT NODE
// on the masters in order, gap apart.
func (c *Cluster) migrate(ctx context.Context, slot int, from, to *Redis, order []*Redis, gap time.Duration) error {
	fromID, err := NodeID(ctx, from)
	if err != nil {
		return err
	}
	toID, err := NodeID(ctx, to)
	if err != nil {
		return err
	}
	s := strconv.Itoa(slot)
	if _, err := rawDo(ctx, to.Addr(), "CLUSTER", "SETSLOT", s, "IMPORTING", fromID); err != nil {
		return fmt.Errorf("testenv: SETSLOT IMPORTING: %w", err)
	}
	if _, err := rawDo(ctx, from.Addr(), "CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		return fmt.Errorf("testenv: SETSLOT MIGRATING: %w", err)
	}
	if err := c.outrankEpochs(ctx, to); err != nil {
		return err
	}
	if err := migrateKeys(ctx, s, from, to); err != nil {
		return err
	}
	for i, n := range order {
		if i > 0 && gap > 0 {
			time.Sleep(gap)
		}
		if _, err := rawDo(ctx, n.Addr(), "CLUSTER", "SETSLOT", s, "NODE", toID); err != nil {
			return fmt.Errorf("testenv: SETSLOT NODE on %s: %w", n.Addr(), err)
		}
	}
	return waitFor(ctx, "every master to agree on the slot's owner", func() (bool, error) {
		for _, n := range c.nodes {
			owner, err := SlotOwner(ctx, n, slot)
			if err != nil {
				return false, err
			}
			if owner != to.Addr() {
				// A master that took SETSLOT NODE may take the old owner
				// back from gossip whose config epoch is higher (seen once
				// in CI, after 60 reshards in a row, for two minutes): it
				// is told again, as a reshard tool that checks would.
				_, _ = rawDo(ctx, n.Addr(), "CLUSTER", "SETSLOT", s, "NODE", toID)
				return false, fmt.Errorf("node %s says slot %d is on %s", n.Addr(), slot, owner)
			}
		}
		return true, nil
	})
}

// outrankEpochs gives the target of a migration a config epoch above every
// other master's, while it is still importing (and so deaf to claims of
// the slot). Without it a stale claim could take the slot back: a PING the
// source sent before it took SETSLOT NODE still claims the slot, with the
// source's epoch, and a target whose epoch is lower gives the slot up on
// reading it and deletes the keys just migrated (Redis drops the keys of a
// slot it loses). SETSLOT NODE bumps the target's epoch only when the
// target does not see itself as the highest already, which after many
// reshards in a row it may do from stale gossip. CI saw it twice (MOVED
// both ways for minutes, or a migrated key gone). CLUSTER BUMPEPOCH takes
// the highest epoch the target knows of plus one; it is sent again until
// every master, asked directly, has a lower one.
func (c *Cluster) outrankEpochs(ctx context.Context, to *Redis) error {
	return waitFor(ctx, "the migration's target to hold the highest config epoch", func() (bool, error) {
		mine, err := myEpoch(ctx, to)
		if err != nil {
			return false, err
		}
		for _, n := range c.nodes {
			if n == to {
				continue
			}
			e, err := myEpoch(ctx, n)
			if err != nil {
				return false, err
			}
			if e >= mine {
				if _, err := rawDo(ctx, to.Addr(), "CLUSTER", "BUMPEPOCH"); err != nil {
					return false, fmt.Errorf("testenv: BUMPEPOCH on %s: %w", to.Addr(), err)
				}
				return false, nil
			}
		}
		return true, nil
	})
}

// myEpoch is a node's own config epoch (CLUSTER INFO's cluster_my_epoch).
func myEpoch(ctx context.Context, r *Redis) (int64, error) {
	v, err := rawDo(ctx, r.Addr(), "CLUSTER", "INFO")
	if err != nil {
		return 0, fmt.Errorf("testenv: node %s: CLUSTER INFO: %w", r.Addr(), err)
	}
	info, err := replyString(v)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_my_epoch:"); ok {
			return strconv.ParseInt(rest, 10, 64)
		}
	}
	return 0, fmt.Errorf("testenv: node %s: CLUSTER INFO has no cluster_my_epoch", r.Addr())
}

// migrateKeys moves every key of slot s from one node to another, 100 keys
// per MIGRATE.
func migrateKeys(ctx context.Context, s string, from, to *Redis) error {
	host, port, _ := net.SplitHostPort(to.Addr())
	for {
		v, err := rawDo(ctx, from.Addr(), "CLUSTER", "GETKEYSINSLOT", s, "100")
		if err != nil {
			return fmt.Errorf("testenv: GETKEYSINSLOT: %w", err)
		}
		keys, _ := v.([]any)
		if len(keys) == 0 {
			return nil
		}
		args := []string{"MIGRATE", host, port, "", "0", "5000", "REPLACE", "KEYS"}
		for _, k := range keys {
			ks, _ := k.(string)
			args = append(args, ks)
		}
		if _, err := rawDo(ctx, from.Addr(), args...); err != nil {
			return fmt.Errorf("testenv: MIGRATE: %w", err)
		}
	}
}

// Failover runs a manual failover (CLUSTER FAILOVER, no option) on replica:
// its master stops serving clients until the replica has caught up, then
// the replica takes over its slots with no write lost. It returns once the
// replica is a master and every node of the cluster says so. Safe for
// concurrent use.
func (c *Cluster) Failover(ctx context.Context, replica *Redis) error {
	if _, err := rawDo(ctx, replica.Addr(), "CLUSTER", "FAILOVER"); err != nil {
		return fmt.Errorf("testenv: CLUSTER FAILOVER: %w", err)
	}
	id, err := NodeID(ctx, replica)
	if err != nil {
		return err
	}
	// Bounded even under a ctx without deadline: a manual failover that
	// times out on the servers is not retried by them.
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	return waitFor(ctx, "the replica to be master everywhere", func() (bool, error) {
		for _, n := range append(c.Nodes(), replica) {
			v, err := rawDo(ctx, n.Addr(), "CLUSTER", "NODES")
			if err != nil {
				return false, err
			}
			s, _ := v.(string)
			ok := false
			for _, line := range strings.Split(s, "\n") {
				f := strings.Fields(line)
				if len(f) > 2 && f[0] == id && strings.Contains(f[2], "master") {
					ok = true
				}
			}
			if !ok {
				return false, fmt.Errorf("node %s does not see %s as master yet", n.Addr(), replica.Addr())
			}
		}
		return true, nil
	})
}
