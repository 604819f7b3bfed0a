package dlock

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// TestShardedCluster runs issue 19's cases on a Cluster 7 of 3 masters and
// 3 replicas: Redisson 3.22+'s sharded waiting both ways, and the cluster
// bus messages a grant costs.
func TestShardedCluster(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	nodes := cl.Nodes()
	for _, m := range nodes {
		nodes = append(nodes, cl.AddReplica(t, m))
	}
	rdb := cl.NewClient(t)
	ctx := ctxT(t)

	t.Run("RedissonWaiterWokenByRelease", func(t *testing.T) {
		// A Redisson 3.22+ waiter SSUBSCRIBEs to the lock's channel.
		name := "interop:redisson-waits"
		sub := rdb.SSubscribe(ctx, keys.LockChannel(name))
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		m := newClientOn(t, rdb).Mutex(name)
		mustLock(t, m)
		released := time.Now()
		mustUnlock(t, m)
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil || msg.Payload != "0" {
			t.Fatalf("the Redisson waiter got %v, %v; want \"0\"", msg, err)
		}
		if d := time.Since(released); d > 100*time.Millisecond {
			t.Fatalf("woken %v after the release", d)
		}
		t.Logf("dlock release to a sharded Redisson waiter: %v", time.Since(released))
	})

	t.Run("WaiterWokenByRedissonRelease", func(t *testing.T) {
		// A Redisson holder (its hash, a UUID:thread owner), then its
		// unlock: DEL and SPUBLISH "0". The dlock waiter must be woken by
		// the message, long before its re-check (3s).
		name := "interop:dlock-waits"
		if err := rdb.HSet(ctx, name, "3f1e9c4e-uuid:1", 1).Err(); err != nil {
			t.Fatal(err)
		}
		rdb.PExpire(ctx, name, 30*time.Second)
		c := newClientOn(t, rdb)
		w := c.Mutex(name)
		got := lockAsync(ctx, w)
		waitFor(t, "the dlock waiter to subscribe", func() bool {
			n, _ := rdb.PubSubShardNumSub(ctx, keys.LockChannel(name)).Result()
			return n[keys.LockChannel(name)] > 0
		})
		time.Sleep(50 * time.Millisecond) // its queueing attempt
		rdb.Del(ctx, name)
		released := time.Now()
		if err := rdb.SPublish(ctx, keys.LockChannel(name), "0").Err(); err != nil {
			t.Fatal(err)
		}
		if d := await(t, got, 5*time.Second, "dlock waiter"); d > 100*time.Millisecond {
			t.Fatalf("the dlock waiter got the lock %v after Redisson's SPUBLISH: not woken by it", d)
		}
		t.Logf("Redisson's SPUBLISH to the dlock waiter's grant: %v", time.Since(released))
		mustUnlock(t, w)
	})

	t.Run("BusMessagesPerGrant", func(t *testing.T) {
		// A hot key handed from waiter to waiter across two Clients: each
		// grant costs one message on the shard's replica link, not one per
		// node.
		a, b := newClientOn(t, rdb), newClientOn(t, rdb)
		name := "bus:hot"
		const grants = 200
		before := busMessages(t, nodes)
		done := make(chan error, 8)
		per := grants / 8
		for i := range 8 {
			c := a
			if i%2 == 1 {
				c = b
			}
			go func() {
				for range per {
					m := c.Mutex(name)
					if err := m.Lock(ctx); err != nil {
						done <- err
						return
					}
					if err := m.Unlock(ctx); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
		}
		for range 8 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond) // the bus delivers what was sent
		after := busMessages(t, nodes)
		perGrant := float64(after-before) / grants
		t.Logf("cluster bus publish messages per grant, 6 nodes: %.2f", perGrant)
		if perGrant > 1.25 {
			t.Fatalf("%.2f bus publish messages per grant on 6 nodes, want at most 1.25", perGrant)
		}
	})
}

// busMessages sums the cluster bus's publish messages sent, classic and
// sharded, over nodes.
func busMessages(t *testing.T, nodes []*testenv.Redis) int64 {
	t.Helper()
	var total int64
	for _, n := range nodes {
		v, err := n.Do(ctxT(t), "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(v.(string), "\n") {
			k, val, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (k == "cluster_stats_messages_publish_sent" || k == "cluster_stats_messages_publishshard_sent") {
				x, _ := strconv.ParseInt(val, 10, 64)
				total += x
			}
		}
	}
	return total
}
