package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// MasterName is the name under which StartSentinel monitors its master. A
// constant; safe for concurrent use.
const MasterName = "mymaster"

// Sentinel timing: a master is subjectively down after DownAfter without a
// valid PING reply; with quorum 1 a lone sentinel then fails over on its own.
const (
	sentinelDownAfter       = 1000 * time.Millisecond
	sentinelFailoverTimeout = 5000 * time.Millisecond
)

// Sentinel is a Redis Sentinel process ("redis-server <conf> --sentinel")
// started by this package, monitoring one master as MasterName with quorum
// 1, down-after-milliseconds 1000 and failover-timeout 5000.
//
// All methods are safe for concurrent use.
type Sentinel struct {
	proc *process
}

// startSentinelServer starts a sentinel monitoring master. The caller must
// call Stop.
func startSentinelServer(binary string, master *Redis) (*Sentinel, error) {
	dir, err := os.MkdirTemp("", "dlock-sentinel-")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	conf := filepath.Join(dir, "sentinel.conf")
	host, port, _ := net.SplitHostPort(master.Addr())
	text := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 1\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		MasterName, host, port, sentinelDownAfter.Milliseconds(), sentinelFailoverTimeout.Milliseconds())
	// Sentinel rewrites its config file, so it lives in the private dir.
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("testenv: %w", err)
	}
	argv := func(p int) []string {
		return []string{conf, "--sentinel",
			"--port", strconv.Itoa(p),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--logfile", "",
			"--daemonize", "no",
		}
	}
	proc, err := startProcess(binary, dir, argv, nil)
	if err != nil {
		return nil, err
	}
	return &Sentinel{proc: proc}, nil
}

// Addr returns the sentinel's "127.0.0.1:PORT". Safe for concurrent use.
func (s *Sentinel) Addr() string { return s.proc.addr }

// Stop kills the sentinel, waits for it to exit and removes its temp
// directory. Idempotent. Safe for concurrent use.
func (s *Sentinel) Stop() error { return s.proc.stop() }

// Log returns the last few KiB of the sentinel's output, for diagnostics;
// "" after Stop. Safe for concurrent use.
func (s *Sentinel) Log() string { return s.proc.logTail() }

// MasterAddr returns the address the sentinel currently reports for
// MasterName (SENTINEL GET-MASTER-ADDR-BY-NAME), "127.0.0.1:PORT". Safe for
// concurrent use.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	v, err := rawDo(ctx, s.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
	if err != nil {
		return "", fmt.Errorf("testenv: sentinel get-master-addr-by-name: %w", err)
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 2 {
		return "", fmt.Errorf("testenv: sentinel get-master-addr-by-name: unexpected reply %v", v)
	}
	host, _ := arr[0].(string)
	port, _ := arr[1].(string)
	return net.JoinHostPort(host, port), nil
}

// Failover forces a failover (SENTINEL FAILOVER, no agreement needed) and
// waits until the sentinel reports a different master address, which it
// returns. The old master is reconfigured as a replica shortly after. It
// needs a replica that the sentinel knows (see StartSentinel). Safe for
// concurrent use, but two failovers at once make the second fail with
// "INPROG".
func (s *Sentinel) Failover(ctx context.Context) (string, error) {
	old, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	if _, err := rawDo(ctx, s.Addr(), "SENTINEL", "FAILOVER", MasterName); err != nil {
		return "", fmt.Errorf("testenv: sentinel failover: %w", err)
	}
	var addr string
	err = waitFor(ctx, "sentinel to switch master", func() (bool, error) {
		a, err := s.MasterAddr(ctx)
		addr = a
		return err == nil && a != old, err
	})
	return addr, err
}

// sentinelFields converts a flat [k1, v1, k2, v2, ...] reply to a map.
func sentinelFields(v any) map[string]string {
	out := make(map[string]string)
	arr, _ := v.([]any)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		out[k] = val
	}
	return out
}

// waitSynced waits until the sentinel is connected to its master and has
// discovered (and connected to) at least as many healthy replicas as the
// master reports, so that a failover can pick one.
func (s *Sentinel) waitSynced(ctx context.Context, master *Redis) error {
	info, err := master.Info(ctx, "replication")
	if err != nil {
		return err
	}
	want, _ := strconv.Atoi(info["connected_slaves"])
	return waitFor(ctx, "sentinel to see master and replicas", func() (bool, error) {
		m, err := rawDo(ctx, s.Addr(), "SENTINEL", "MASTER", MasterName)
		if err != nil {
			return false, err
		}
		if f := sentinelFields(m)["flags"]; f != "master" {
			return false, fmt.Errorf("master flags %q", f)
		}
		v, err := rawDo(ctx, s.Addr(), "SENTINEL", "REPLICAS", MasterName)
		if err != nil {
			return false, err
		}
		reps, _ := v.([]any)
		healthy := 0
		for _, rep := range reps {
			f := sentinelFields(rep)
			if f["flags"] == "slave" && f["master-link-status"] == "ok" {
				healthy++
			}
		}
		if healthy < want {
			return false, fmt.Errorf("%d of %d replicas healthy", healthy, want)
		}
		return true, nil
	})
}
