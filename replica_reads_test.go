package dlock

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// replicaReadingClient starts a primary and a replica whose replication
// link runs through a fault proxy (so a test can make the replica lag while
// it still says its link is up), and returns a Cluster client over the two
// that sends read-only commands to the replica (ReadOnly: the routing of
// RouteByLatency, RouteRandomly and NewFailoverClusterClient's too), a
// plain client of the primary, and the link.
func replicaReadingClient(t *testing.T, ctx context.Context) (*redis.ClusterClient, *redis.Client, *testenv.Redis, *testenv.FaultProxy) {
	t.Helper()
	primary := testenvRedis(t)
	link := testenv.NewFaultProxy(t, primary.Addr())
	host, port, _ := net.SplitHostPort(link.Addr())
	replica := testenv.StartRedis(t, testenv.WithArgs("--replicaof", host, port))
	waitFor(t, "the replication link", func() bool {
		info, err := replica.Info(ctx, "replication")
		return err == nil && info["master_link_status"] == "up"
	})
	t.Cleanup(func() { _ = link.Heal() })
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: testenv.ClusterSlots - 1, Nodes: []redis.ClusterNode{
				{Addr: primary.Addr()}, {Addr: replica.Addr()},
			}}}, nil
		},
		ReadOnly:                 true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, primary.NewClient(t), replica, link
}

// A pass in memory asks the primary whether the releaser's hold is still
// there, even over a client that sends reads to replicas: a lagging
// replica still has a hold the primary lost (here a neighbour deleted it),
// and its answer would make the releaser's Unlock report nothing and leave
// the next goroutine holding beside another Client, neither told. (Found
// by a review; the check was a bare HEXISTS.)
func TestPassInMemoryCheckAsksThePrimary(t *testing.T) {
	ctx := ctxT(t)
	rdb, plain, replica, link := replicaReadingClient(t, ctx)
	c := newClientOn(t, rdb)
	const name = "replica:pass"
	m := c.Mutex(name)
	b, held := passedInRedis(t, ctx, c, m, 2)
	field := holderField(m)
	waitFor(t, "the replica has the hold", func() bool {
		v, err := replica.Do(ctx, "HEXISTS", name, field)
		return err == nil && v == int64(1)
	})
	link.BlackholeOpen() // the replica lags from here on
	if err := plain.Del(ctx, name).Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(b); !errors.Is(err, ErrLockLost) {
		t.Errorf("Unlock of a hold the primary no longer had: %v, want its loss", err)
	}
	cctx := <-held
	if cctx == nil {
		t.FailNow()
	}
	if f := holderField(m); !plain.HExists(ctx, name, f).Val() && cctx.Err() == nil {
		t.Errorf("the next goroutine holds (token %d, ctx live) a hold the primary does not have", TokenFrom(cctx))
	}
	_ = link.Heal()
	_ = m.Unlock(cctx)
}

// A latch's count is read from the primary over a client that sends reads
// to replicas: a replica that has not yet seen the latch set would say it
// does not exist, that is open, and Wait would return at once.
func TestLatchCountAsksThePrimary(t *testing.T) {
	ctx := ctxT(t)
	rdb, _, _, link := replicaReadingClient(t, ctx)
	c := newClientOn(t, rdb)
	link.BlackholeOpen() // the replica lags from here on
	l := c.CountDownLatch("replica:latch")
	if ok, err := l.TrySetCount(ctx, 2, time.Minute); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	if n, err := l.Count(ctx); n != 2 || err != nil {
		t.Errorf("Count: %d, %v, want 2 (the primary's)", n, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := l.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait on a latch of count 2: %v, want its ctx's deadline", err)
	}
	_ = link.Heal()
}
