package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a private redis-server started by the bench on a free
// loopback port, without persistence. It is never the shared instance on
// 6379.
type redisServer struct {
	Addr    string
	Port    int
	Version string

	cmd     *exec.Cmd
	dir     string
	logFile *os.File
	admin   *redis.Client // separate connection for INFO / CONFIG RESETSTAT / FLUSHALL

	exited   chan error // receives cmd.Wait's result
	stopOnce sync.Once

	mu       sync.Mutex
	baseline map[string]int64 // commandstats right after RESETSTAT (the bench's own calls)
	baseUsec map[string]int64 // and their time
	cpu0     time.Duration    // main-thread CPU at the last ResetStats
}

// freeLoopbackPort asks the kernel for a free port on 127.0.0.1 (":0"
// trick) and releases it for redis-server to bind.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts redis-server (binary path bin) and waits until it
// answers PING. It retries with a new port if the port was taken in between.
func startRedis(bin string) (*redisServer, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := startRedisOnce(bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startRedisOnce(bin string) (*redisServer, error) {
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	if port == 6379 {
		return nil, errors.New("refusing port 6379 (shared instance)")
	}
	dir, err := os.MkdirTemp("", "dlock-bench-redis-")
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--databases", "1",
		"--maxclients", "20000",
	)
	cmd.Stdout = logFile // *os.File: no copying goroutine
	cmd.Stderr = logFile
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	s := &redisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, cmd: cmd, dir: dir, logFile: logFile}
	s.admin = redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 1, MaxRetries: -1, Protocol: 2, DisableIdentity: true})

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := s.admin.Ping(ctx).Err()
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-exited:
			s.admin.Close()
			logFile.Close()
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server exited (%v): %s", werr, lastLines(string(log), 5))
		default:
		}
		if time.Now().After(deadline) {
			s.kill(exited)
			return nil, fmt.Errorf("redis-server on %s did not answer PING: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.exited = exited
	info, err := s.admin.Info(context.Background(), "server").Result()
	if err == nil {
		s.Version = infoField(info, "redis_version")
	}
	return s, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (s *redisServer) kill(exited chan error) {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-exited
	s.logFile.Close()
	os.RemoveAll(s.dir)
}

// Stop kills the server and removes its directory. Safe to call more than
// once and from a signal handler.
func (s *redisServer) Stop() {
	s.stopOnce.Do(func() { s.kill(s.exited) })
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// parseCommandStats parses INFO commandstats into command -> calls. The
// counts include commands run inside Lua scripts (Redis counts them).
func parseCommandStats(info string) (map[string]int64, error) {
	calls, _, err := parseCommandTimes(info)
	return calls, err
}

// parseCommandTimes parses INFO commandstats into command -> calls and
// command -> microseconds spent running it. A script's EVALSHA time
// includes the commands it ran, which are also counted on their own.
func parseCommandTimes(info string) (calls, usec map[string]int64, err error) {
	calls, usec = map[string]int64{}, map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, nil, fmt.Errorf("bad commandstats line %q", line)
		}
		for _, f := range strings.Split(fields, ",") {
			key, v, _ := strings.Cut(f, "=")
			var into map[string]int64
			switch key {
			case "calls":
				into = calls
			case "usec":
				into = usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("bad commandstats line %q: %v", line, err)
			}
			into[name] += n
		}
	}
	return calls, usec, sc.Err()
}

// ResetStats runs CONFIG RESETSTAT and notes the main thread's CPU time.
// The first call also measures what the bench's own RESETSTAT, INFO cpu and
// final INFO leave in the counters, so that SinceReset can subtract it.
func (s *redisServer) ResetStats(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.baseline == nil {
		if err := s.admin.ConfigResetStat(ctx).Err(); err != nil {
			return err
		}
		if _, err := s.admin.Info(ctx, "cpu").Result(); err != nil {
			return err
		}
		info, err := s.admin.Info(ctx, "cpu", "commandstats").Result()
		if err != nil {
			return err
		}
		if s.baseline, s.baseUsec, err = parseCommandTimes(info); err != nil {
			return err
		}
	}
	if err := s.admin.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	info, err := s.admin.Info(ctx, "cpu").Result()
	if err != nil {
		return err
	}
	s.cpu0, err = parseMainThreadCPU(info)
	return err
}

// target is what scenarios (a) and (b) run against: the private
// redis-server, or the cluster scenario's Cluster (scenario_cluster.go).
type target interface {
	// dialAddr is what a Lib's NewClient is given: "host:port", or the
	// Cluster's nodes joined by commas.
	dialAddr() string
	Flush(ctx context.Context) error
	ResetStats(ctx context.Context) error
	SinceReset(ctx context.Context) (Usage, error)
}

func (s *redisServer) dialAddr() string { return s.Addr }

// Usage is what Redis did since the last ResetStats.
type Usage struct {
	Cmds  map[string]int64 // calls per command, commands run inside scripts included
	Total int64            // all calls
	// Usec is the time Redis spent in each command, in microseconds
	// (single server only). An EVALSHA's includes its script's commands.
	Usec map[string]int64
	// CPU is the main thread's CPU time (user + system, INFO cpu's
	// used_cpu_user_main_thread + used_cpu_sys_main_thread): the thread
	// that runs every command and script, and the resource every client of
	// a shared Redis competes for. The bench's own INFO and RESETSTAT cost
	// a few microseconds of it.
	CPU time.Duration
	// Bus is the cluster bus's publish messages sent, classic and sharded,
	// summed over a Cluster's nodes (0 on one server).
	Bus int64
}

// SinceReset returns the commands run since the last ResetStats, minus the
// bench's own RESETSTAT/INFO calls, and the main thread's CPU time, both
// from one INFO call.
func (s *redisServer) SinceReset(ctx context.Context) (Usage, error) {
	info, err := s.admin.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return Usage{}, err
	}
	st, usec, err := parseCommandTimes(info)
	if err != nil {
		return Usage{}, err
	}
	cpu, err := parseMainThreadCPU(info)
	if err != nil {
		return Usage{}, err
	}
	s.mu.Lock()
	for k, v := range s.baseline {
		st[k] -= v
		if st[k] <= 0 {
			delete(st, k)
		}
	}
	for k, v := range s.baseUsec {
		usec[k] -= v
	}
	for k, v := range usec {
		// The bench's own calls take a different time at each call: only
		// commands that others ran keep theirs.
		if _, ran := st[k]; !ran || v <= 0 {
			delete(usec, k)
		}
	}
	cpu -= s.cpu0
	s.mu.Unlock()
	u := Usage{Cmds: st, Usec: usec, CPU: cpu}
	for _, v := range st {
		u.Total += v
	}
	return u, nil
}

func parseMainThreadCPU(info string) (time.Duration, error) {
	var total float64
	for _, f := range []string{"used_cpu_user_main_thread", "used_cpu_sys_main_thread"} {
		v := infoField(info, f)
		if v == "" {
			return 0, fmt.Errorf("INFO cpu has no %s (Redis >= 6.2 reports it)", f)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %v", f, err)
		}
		total += x
	}
	return time.Duration(total * float64(time.Second)), nil
}

// settle waits until Redis has run no command but the bench's own INFO for
// one poll interval (at most limit), and returns whether it got there. Work
// a library does once per Client, in the background, after its first
// acquisition (dlock's first-contact doctor checks: a full INFO, CONFIG
// GETs, a pub/sub probe) then finishes during the warm-up instead of being
// charged to the grants of a short run, which a long-lived app server would
// not see. Leaves the counters reset: callers reset them again anyway.
func settle(ctx context.Context, srv target, every, limit time.Duration) (bool, error) {
	if err := srv.ResetStats(ctx); err != nil {
		return false, err
	}
	deadline := time.Now().Add(limit)
	last := int64(-1)
	for {
		u, err := srv.SinceReset(ctx)
		if err != nil {
			return false, err
		}
		// Our own polls are INFO calls the baseline does not cover.
		n := u.Total - u.Cmds["info"]
		if n == last {
			return true, nil
		}
		if !time.Now().Before(deadline) {
			return false, nil
		}
		last = n
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// settleWarm is settle with the scenarios' bounds: quiet for 25 ms, at
// most 3 s (dlock's doctor takes a few ms per Client here).
func settleWarm(ctx context.Context, srv target) error {
	_, err := settle(ctx, srv, 25*time.Millisecond, 3*time.Second)
	return err
}

// Flush empties the database between runs (keys of a previous library must
// not block the next one). Lua scripts stay cached.
func (s *redisServer) Flush(ctx context.Context) error {
	return s.admin.FlushAll(ctx).Err()
}

// DBSize returns the number of keys.
func (s *redisServer) DBSize(ctx context.Context) (int64, error) {
	return s.admin.DBSize(ctx).Result()
}
