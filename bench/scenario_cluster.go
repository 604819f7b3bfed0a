//go:build !nodlock

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// The cluster scenario (-scenarios cluster, issue 19 part 5): dlock on a
// private Redis Cluster of M masters, each with one replica, in its default
// sharded pub/sub mode and with classic PUBLISH (ShardedOff), for every M.
// It reuses scenarios (a) and (b) through a target that sums every node's
// counters.

func init() { clusterRunner = runCluster }

// clusterModes are the two rows per cluster size.
var clusterModes = []clusterLib{
	{name: "sharded", opts: nil},
	{name: "classic", opts: []dlock.Option{dlock.WithShardedPubSub(dlock.ShardedOff)}},
}

// clusterLib is dlock on a *redis.ClusterClient; NewClient's addr is the
// nodes' addresses joined by commas.
type clusterLib struct {
	name string
	opts []dlock.Option
}

func (l clusterLib) Name() string { return l.name }

func (l clusterLib) NewClient(addrs string) (Client, error) {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                    strings.Split(addrs, ","),
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	c, err := dlock.New(rdb, l.opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &clusterDlockClient{rdb: rdb, c: c}, nil
}

type clusterDlockClient struct {
	rdb *redis.ClusterClient
	c   *dlock.Client
}

func (c *clusterDlockClient) Acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	m := c.c.Mutex(key)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

func (c *clusterDlockClient) Close() error {
	return errors.Join(c.c.Close(), c.rdb.Close())
}

// clusterTarget is a running Cluster with one replica per master, as a
// target: Flush empties every master, and Usage is the sum over every node
// (masters and replicas) of the counters' deltas since ResetStats.
type clusterTarget struct {
	cl       *testenv.Cluster
	masters  []*testenv.Redis
	replicas []*testenv.Redis

	mu     sync.Mutex
	base   nodeCounters
	t0     time.Time     // of the last ResetStats
	window time.Duration // between the last ResetStats and SinceReset
}

// nodeCounters is a snapshot summed over the nodes.
type nodeCounters struct {
	cmds map[string]int64
	cpu  time.Duration // used_cpu_sys + used_cpu_user: the whole process
	bus  int64         // cluster_stats_messages_publish_sent + _publishshard_sent
}

// startClusterTarget starts masters masters and one replica for each.
func startClusterTarget(masters int, bin string) (*clusterTarget, error) {
	cfg := testenv.RedisConfig{Binary: bin}
	cl, err := testenv.StartClusterServer(masters, cfg)
	if err != nil {
		return nil, err
	}
	t := &clusterTarget{cl: cl, masters: cl.Nodes()}
	for _, m := range t.masters {
		r, err := cl.StartReplica(m, cfg)
		if err != nil {
			t.Stop()
			return nil, err
		}
		t.replicas = append(t.replicas, r)
	}
	return t, nil
}

func (t *clusterTarget) nodes() []*testenv.Redis {
	return append(append([]*testenv.Redis(nil), t.masters...), t.replicas...)
}

// Stop stops the replicas, then the masters.
func (t *clusterTarget) Stop() {
	for _, r := range t.replicas {
		_ = r.Stop()
	}
	_ = t.cl.Stop()
}

func (t *clusterTarget) dialAddr() string { return strings.Join(t.cl.Addrs(), ",") }

func (t *clusterTarget) Flush(ctx context.Context) error {
	for _, m := range t.masters {
		if _, err := m.Do(ctx, "FLUSHALL"); err != nil {
			return fmt.Errorf("FLUSHALL on %s: %w", m.Addr(), err)
		}
	}
	return nil
}

func (t *clusterTarget) ResetStats(ctx context.Context) error {
	c, err := t.snapshot(ctx)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.base, t.t0 = c, time.Now()
	t.mu.Unlock()
	return nil
}

// ownCommands are what snapshot itself sends; they are left out of Cmds.
var ownCommands = map[string]bool{"info": true, "cluster|info": true, "hello": true, "ping": true}

func (t *clusterTarget) SinceReset(ctx context.Context) (Usage, error) {
	c, err := t.snapshot(ctx)
	if err != nil {
		return Usage{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.window = time.Since(t.t0)
	u := Usage{Cmds: map[string]int64{}, CPU: c.cpu - t.base.cpu, Bus: c.bus - t.base.bus}
	for k, v := range c.cmds {
		if d := v - t.base.cmds[k]; d > 0 && !ownCommands[k] {
			u.Cmds[k] = d
			u.Total += d
		}
	}
	return u, nil
}

// snapshot reads every node's counters and sums them.
func (t *clusterTarget) snapshot(ctx context.Context) (nodeCounters, error) {
	c := nodeCounters{cmds: map[string]int64{}}
	for _, n := range t.nodes() {
		cmds, err := n.CommandStats(ctx)
		if err != nil {
			return c, err
		}
		for k, v := range cmds {
			c.cmds[k] += v
		}
		cpu, err := n.Info(ctx, "cpu")
		if err != nil {
			return c, err
		}
		for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
			x, err := strconv.ParseFloat(cpu[f], 64)
			if err != nil {
				return c, fmt.Errorf("node %s: INFO cpu %s: %q", n.Addr(), f, cpu[f])
			}
			c.cpu += time.Duration(x * float64(time.Second))
		}
		bus, err := busSent(ctx, n)
		if err != nil {
			return c, err
		}
		c.bus += bus
	}
	return c, nil
}

// lastWindow is the time between the last ResetStats and SinceReset.
func (t *clusterTarget) lastWindow() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.window
}

// idleCPU measures the nodes' CPU over d with no client: what the cluster
// costs at rest (server and cluster crons, bus pings, replication pings),
// in µs of CPU per second.
func (t *clusterTarget) idleCPU(ctx context.Context, d time.Duration) (float64, error) {
	if err := t.ResetStats(ctx); err != nil {
		return 0, err
	}
	time.Sleep(d)
	u, err := t.SinceReset(ctx)
	if err != nil {
		return 0, err
	}
	return us(u.CPU) / t.lastWindow().Seconds(), nil
}

// busSent is a node's cluster bus publish messages sent, classic and
// sharded (CLUSTER INFO).
func busSent(ctx context.Context, n *testenv.Redis) (int64, error) {
	v, err := n.Do(ctx, "CLUSTER", "INFO")
	if err != nil {
		return 0, fmt.Errorf("node %s: CLUSTER INFO: %w", n.Addr(), err)
	}
	s, _ := v.(string)
	var total int64
	for _, f := range []string{"cluster_stats_messages_publish_sent", "cluster_stats_messages_publishshard_sent"} {
		if x := infoField(s, f); x != "" {
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("CLUSTER INFO %s: %q", f, x)
			}
			total += n
		}
	}
	return total, nil
}

// runCluster runs the cluster scenario for every size in cfg.Masters.
func runCluster(ctx context.Context, cfg ClusterConfig, progress io.Writer, problem func(string, ...any)) (*ClusterReport, error) {
	rep := &ClusterReport{Config: cfg}
	var runs []ClusterRun
	for _, m := range cfg.Masters {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(progress, "[cluster M=%d] starting %d masters and %d replicas ...\n", m, m, m)
		t0 := time.Now()
		t, err := startClusterTarget(m, cfg.ServerBin)
		if err != nil {
			return rep, fmt.Errorf("start a cluster of %d masters: %w", m, err)
		}
		setClusterStop(t.Stop)
		if rep.RedisVersion == "" {
			if info, err := t.masters[0].Info(ctx, "server"); err == nil {
				rep.RedisVersion = info["redis_version"]
			}
		}
		idle, err := t.idleCPU(ctx, time.Second)
		if err != nil {
			t.Stop()
			return rep, fmt.Errorf("cluster of %d masters: idle CPU: %w", m, err)
		}
		fmt.Fprintf(progress, "    ready in %.1f s; idle, the nodes use %.0f µs of CPU per second\n", time.Since(t0).Seconds(), idle)
		runs = append(runs, runClusterSize(ctx, t, m, idle, cfg, progress, problem)...)
		t.Stop()
		setClusterStop(nil)
	}
	rep.Groups = groupCluster(runs)
	return rep, nil
}

// runClusterSize runs every mode cfg.Reps times on one running cluster, in
// a rotated order per repetition.
func runClusterSize(ctx context.Context, t *clusterTarget, m int, idle float64, cfg ClusterConfig, progress io.Writer, problem func(string, ...any)) []ClusterRun {
	libs := make([]Lib, len(clusterModes))
	for i, l := range clusterModes {
		libs[i] = l
	}
	var runs []ClusterRun
	for r := 1; r <= cfg.Reps && ctx.Err() == nil; r++ {
		for _, lib := range rotate(libs, r-1) {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(progress, "[cluster M=%d] %-8s rep %d/%d ... ", m, lib.Name(), r, cfg.Reps)
			cr, err := runClusterOnce(ctx, t, lib, clusterRunIn{m, idle, r}, cfg)
			if err != nil {
				fmt.Fprintln(progress)
				problem("cluster M=%d %s rep %d: %v", m, lib.Name(), r, err)
				continue
			}
			fmt.Fprintf(progress, "%.0f pairs/s, gap p50 %.2f ms, %.2f bus msgs/grant, Redis CPU %.0f µs/grant (%.0f above idle)\n", cr.PairsPerS, cr.GapP50Ms, cr.BusPerGrant, cr.CPUGrantUs, cr.CPUGrantNetUs)
			for _, p := range cr.Problems {
				problem("cluster M=%d %s rep %d: %s", m, lib.Name(), r, p)
			}
			runs = append(runs, cr)
		}
	}
	return runs
}

// clusterRunIn is where one repetition runs: the cluster size, its idle
// CPU (µs per second) and the repetition.
type clusterRunIn struct {
	masters int
	idle    float64
	rep     int
}

// runClusterOnce is one uncontended run and one hot-key run of lib.
func runClusterOnce(ctx context.Context, t *clusterTarget, lib Lib, in clusterRunIn, cfg ClusterConfig) (ClusterRun, error) {
	cr := ClusterRun{Masters: in.masters, Nodes: len(t.masters) + len(t.replicas), Mode: lib.Name(), Rep: in.rep, IdleCPUUsPerS: in.idle}
	// aboveIdle is the CPU of a run beyond what the nodes use at rest, µs.
	aboveIdle := func(cpuUs float64) float64 { return max(0, cpuUs-in.idle*t.lastWindow().Seconds()) }
	ur, err := runUncontended(ctx, t, lib, UncontendedConfig{G: cfg.G, Duration: cfg.Duration}, in.rep)
	if err != nil {
		return cr, err
	}
	cr.Problems = append(cr.Problems, ur.Problems()...)
	cr.PairsPerS, cr.PairP50Us = ur.PairsPerS, ur.PairP50Us
	if ur.Pairs > 0 {
		cr.BusPerPair = float64(ur.BusMsgs) / float64(ur.Pairs)
		cr.CPUPairUs = ur.CPUPairUs
		cr.CPUPairNetUs = aboveIdle(ur.CPUPairUs*float64(ur.Pairs)) / float64(ur.Pairs)
	}
	k := max(1, cfg.Grants/cfg.W)
	hr, err := runHotkey(ctx, t, lib, HotkeyConfig{W: cfg.W, K: k, Hold: cfg.Hold}, in.rep)
	if err != nil {
		return cr, err
	}
	cr.Problems = append(cr.Problems, hr.Problems()...)
	cr.Grants, cr.GapP50Ms, cr.GapP99Ms = hr.Grants, hr.GapP50Ms, hr.GapP99Ms
	cr.CmdsPerGrant, cr.CPUGrantUs = hr.CmdsPerGrant, hr.CPUGrantUs
	if hr.Grants > 0 {
		cr.BusPerGrant = float64(hr.BusMsgs) / float64(hr.Grants)
		cr.CPUGrantNetUs = aboveIdle(hr.CPUGrantUs*float64(hr.Grants)) / float64(hr.Grants)
	}
	return cr, nil
}

func setClusterStop(f func()) {
	clusterStopMu.Lock()
	clusterStop = f
	clusterStopMu.Unlock()
}

func groupCluster(runs []ClusterRun) []ClusterGroup {
	type key struct {
		m    int
		mode string
	}
	byKey := map[key][]ClusterRun{}
	for _, r := range runs {
		k := key{r.Masters, r.Mode}
		byKey[k] = append(byKey[k], r)
	}
	var out []ClusterGroup
	for k, rs := range byKey {
		pick := func(f func(ClusterRun) float64) Summary {
			var xs []float64
			for _, r := range rs {
				xs = append(xs, f(r))
			}
			return summarize(xs)
		}
		out = append(out, ClusterGroup{
			Masters: k.m, Nodes: rs[0].Nodes, Mode: k.mode, Runs: rs,
			PairsPerS:     pick(func(r ClusterRun) float64 { return r.PairsPerS }),
			BusPerPair:    pick(func(r ClusterRun) float64 { return r.BusPerPair }),
			CPUPairUs:     pick(func(r ClusterRun) float64 { return r.CPUPairUs }),
			CPUPairNetUs:  pick(func(r ClusterRun) float64 { return r.CPUPairNetUs }),
			GapP50Ms:      pick(func(r ClusterRun) float64 { return r.GapP50Ms }),
			GapP99Ms:      pick(func(r ClusterRun) float64 { return r.GapP99Ms }),
			BusPerGrant:   pick(func(r ClusterRun) float64 { return r.BusPerGrant }),
			CPUGrantUs:    pick(func(r ClusterRun) float64 { return r.CPUGrantUs }),
			CPUGrantNetUs: pick(func(r ClusterRun) float64 { return r.CPUGrantNetUs }),
			IdleCPUUsPerS: pick(func(r ClusterRun) float64 { return r.IdleCPUUsPerS }),
			CmdsPerGrant:  pick(func(r ClusterRun) float64 { return r.CmdsPerGrant }),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Masters != out[j].Masters {
			return out[i].Masters < out[j].Masters
		}
		return modeIndex(out[i].Mode) < modeIndex(out[j].Mode)
	})
	return out
}

func modeIndex(mode string) int {
	return slices.Index([]string{"sharded", "classic"}, mode)
}
