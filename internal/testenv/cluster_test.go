package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// keySlot asks node r for the cluster slot of key.
func keySlot(t *testing.T, r *Redis, key string) int {
	t.Helper()
	v, err := r.Do(ctxT(t, 5*time.Second), "CLUSTER", "KEYSLOT", key)
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	n, ok := v.(int64)
	if !ok {
		t.Fatalf("CLUSTER KEYSLOT %s = %v", key, v)
	}
	return int(n)
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 0)
	t.Logf("cluster of %d started in %v", len(c.Nodes()), time.Since(start))
	nodes := c.Nodes()
	if len(nodes) != DefaultClusterMasters {
		t.Fatalf("%d nodes, want %d", len(nodes), DefaultClusterMasters)
	}

	t.Run("ReadyState", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		addrs := c.Addrs()
		seen := map[string]bool{}
		for i, r := range nodes {
			if addrs[i] != r.Addr() || seen[r.Addr()] || strings.HasSuffix(r.Addr(), ":6379") {
				t.Fatalf("Addrs() = %v, node %d is %s", addrs, i, r.Addr())
			}
			seen[r.Addr()] = true
			v, err := r.Do(ctx, "CLUSTER", "INFO")
			if err != nil {
				t.Fatal(err)
			}
			info := parseInfo(v.(string))
			if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != "16384" || info["cluster_known_nodes"] != "3" {
				t.Fatalf("node %s: CLUSTER INFO %v", r.Addr(), info)
			}
			// nodes.conf lives in the node's own directory, removed by Stop.
			if _, err := os.Stat(filepath.Join(r.proc.dir, "data", "nodes.conf")); err != nil {
				t.Fatalf("node %s: %v", r.Addr(), err)
			}
			cfg, err := r.Do(ctx, "CONFIG", "GET", "cluster-node-timeout")
			if err != nil || fmt.Sprint(cfg) != "[cluster-node-timeout 2000]" {
				t.Fatalf("node %s: cluster-node-timeout %v, %v", r.Addr(), cfg, err)
			}
			cfg, err = r.Do(ctx, "CONFIG", "GET", "save")
			if err != nil || fmt.Sprint(cfg) != "[save ]" {
				t.Fatalf("node %s: save %v, %v", r.Addr(), cfg, err)
			}
		}
		// Every slot has exactly one node, the ranges in node order.
		for slot := 0; slot < ClusterSlots; slot++ {
			if c.SlotNode(slot) == nil {
				t.Fatalf("slot %d has no node", slot)
			}
		}
		if c.SlotNode(0) != nodes[0] || c.SlotNode(ClusterSlots-1) != nodes[len(nodes)-1] ||
			c.SlotNode(-1) != nil || c.SlotNode(ClusterSlots) != nil {
			t.Fatal("SlotNode does not follow the node order")
		}
	})

	t.Run("HashTagsSpreadOverNodes", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		rdb := c.NewClient(t)
		// One key per node, found by hash tag.
		keyOf := map[*Redis]string{}
		for i := 0; len(keyOf) < len(nodes) && i < 1000; i++ {
			key := "tagged:{" + strconv.Itoa(i) + "}"
			owner := c.SlotNode(keySlot(t, nodes[0], key))
			if _, ok := keyOf[owner]; !ok {
				keyOf[owner] = key
			}
		}
		if len(keyOf) != len(nodes) {
			t.Fatalf("keys found for %d of %d nodes", len(keyOf), len(nodes))
		}
		for owner, key := range keyOf {
			if err := rdb.Set(ctx, key, owner.Addr(), time.Minute).Err(); err != nil {
				t.Fatalf("SET %s: %v", key, err)
			}
			for _, r := range nodes {
				v, err := r.Do(ctx, "GET", key)
				if r == owner {
					if err != nil || v != owner.Addr() {
						t.Fatalf("GET %s on its node %s = %v, %v", key, r.Addr(), v, err)
					}
				} else if err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
					t.Fatalf("GET %s on node %s = %v, %v; want MOVED", key, r.Addr(), v, err)
				}
			}
		}
		// The same tag keeps keys together.
		for _, key := range keyOf {
			tagged := "other:" + key[strings.IndexByte(key, '{'):]
			if a, b := keySlot(t, nodes[0], key), keySlot(t, nodes[0], tagged); a != b {
				t.Fatalf("%s in slot %d, %s in slot %d", key, a, tagged, b)
			}
		}
	})

	t.Run("ClientAcrossSlots", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		rdb := c.NewClient(t)
		for _, r := range nodes {
			if err := r.ResetStats(ctx); err != nil {
				t.Fatal(err)
			}
		}
		const n = 60
		for i := 0; i < n; i++ {
			if err := rdb.Set(ctx, "k"+strconv.Itoa(i), i, time.Minute).Err(); err != nil {
				t.Fatalf("SET k%d: %v", i, err)
			}
		}
		for i := 0; i < n; i++ {
			if v, err := rdb.Get(ctx, "k"+strconv.Itoa(i)).Int(); err != nil || v != i {
				t.Fatalf("GET k%d = %v, %v", i, v, err)
			}
		}
		var total int64
		for _, r := range nodes {
			stats, err := r.CommandStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if stats["set"] == 0 || stats["get"] == 0 {
				t.Fatalf("node %s served no SET or GET: %v", r.Addr(), stats)
			}
			total += stats["set"]
		}
		if total != n {
			t.Fatalf("the nodes counted %d SETs, want %d (redirections?)", total, n)
		}
		if _, err := rdb.Get(ctx, "missing").Result(); err != redis.Nil {
			t.Fatalf("GET missing: %v, want redis.Nil", err)
		}
	})

	t.Run("PublishReachesOtherNodes", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		rdb := c.NewClient(t)
		ps := rdb.Subscribe(ctx, "news")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil { // the subscription confirmation
			t.Fatal(err)
		}
		// Publish on every node: the cluster bus forwards each message to
		// the node the subscriber is connected to.
		for _, r := range nodes {
			if _, err := r.Do(ctx, "PUBLISH", "news", r.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		got := map[string]bool{}
		for len(got) < len(nodes) {
			m, err := ps.ReceiveMessage(ctx)
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			got[m.Payload] = true
		}
	})
}

func TestStartClusterServerBadSize(t *testing.T) {
	t.Parallel()
	if c, err := StartClusterServer(-1, RedisConfig{}); err == nil {
		_ = c.Stop()
		t.Fatal("a cluster of -1 masters started")
	}
	if _, err := StartClusterServer(2, RedisConfig{Binary: "no-such-redis-server"}); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing binary: %v", err)
	}
}

func TestClusterStopRemovesNodes(t *testing.T) {
	t.Parallel()
	c, err := StartClusterServer(1, RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{}
	for _, r := range c.Nodes() {
		dirs = append(dirs, r.proc.dir)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	for i, r := range c.Nodes() {
		if !refused(r.Addr()) {
			t.Fatalf("node %s still accepts connections", r.Addr())
		}
		if _, err := os.Stat(dirs[i]); !os.IsNotExist(err) {
			t.Fatalf("node dir %s: %v", dirs[i], err)
		}
	}
}
