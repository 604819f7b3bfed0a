package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// helperEnv makes the test binary act as a helper process that starts a
// server, prints its address and then waits to be killed.
const helperEnv = "DLOCK_TESTENV_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "1":
		helperMain()
		return
	case "mariadb", "postgres":
		sqlHelperMain(os.Getenv(helperEnv))
		return
	}
	goleak.VerifyTestMain(m)
}

func helperMain() {
	r, err := StartRedisServer(RedisConfig{})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Println(r.Addr(), r.PID())
	time.Sleep(time.Minute) // killed by the parent long before
	os.Exit(2)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// refused reports whether nothing accepts connections on addr.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return true
	}
	_ = c.Close()
	return false
}

func TestStartPing(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 10*time.Second)
	r := StartRedis(t)

	host, port, err := net.SplitHostPort(r.Addr())
	if err != nil || host != "127.0.0.1" || port == "6379" || port != strconv.Itoa(r.Port()) {
		t.Fatalf("Addr() = %q, Port() = %d", r.Addr(), r.Port())
	}
	if v, err := r.Do(ctx, "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING = %v, %v", v, err)
	}
	c := r.NewClient(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Do(ctx, "GET", "k"); err != nil || v != "v" {
		t.Fatalf("GET = %v, %v", v, err)
	}
	if _, err := r.Do(ctx, "GET", "missing"); err != redis.Nil {
		t.Fatalf("GET missing: err = %v, want redis.Nil", err)
	}
	// Persistence is off.
	for param, want := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"} {
		v, err := r.Do(ctx, "CONFIG", "GET", param)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.([]any); len(got) != 2 || got[1] != want {
			t.Errorf("CONFIG GET %s = %v, want %q", param, got, want)
		}
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 10*time.Second)
	r := StartRedis(t, WithArgs("--maxmemory", "1mb"))
	v, err := r.Do(ctx, "CONFIG", "GET", "maxmemory")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.([]any); got[1] != "1048576" {
		t.Fatalf("maxmemory = %v", got)
	}
}

func TestKillRestartSamePortDataGone(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 30*time.Second)
	r := StartRedis(t)
	addr, pid := r.Addr(), r.PID()
	c := r.NewClient(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if !refused(addr) {
		t.Fatal("server still accepts connections after Kill")
	}
	if r.PID() != 0 {
		t.Fatalf("PID() = %d after Kill", r.PID())
	}
	if err := r.Kill(); err != nil { // no-op
		t.Fatalf("second Kill: %v", err)
	}

	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if r.Addr() != addr || r.PID() == pid || r.PID() == 0 {
		t.Fatalf("after Restart: addr %s (was %s), pid %d (was %d)", r.Addr(), addr, r.PID(), pid)
	}
	if _, err := r.Do(ctx, "GET", "k"); err != redis.Nil {
		t.Fatalf("GET k after restart: err = %v, want redis.Nil (data must be gone)", err)
	}
	// The go-redis client reconnects to the same address.
	if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
		// The first command may hit the dead pooled connection.
		if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Restart while running kills first; data gone again.
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Do(ctx, "GET", "k2"); err != redis.Nil {
		t.Fatalf("GET k2 after running restart: err = %v, want redis.Nil", err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)

	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	start := time.Now()
	_, err := r.Do(ctx, "PING")
	cancel()
	if err == nil {
		t.Fatal("PING answered while paused")
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Fatalf("PING failed after only %v (%v); want a timeout", el, err)
	}
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("PING while paused: %v, want a timeout", err)
	}

	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Do(ctxT(t, 5*time.Second), "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING after Resume = %v, %v", v, err)
	}

	// Stop (in Cleanup) must also work on a paused server.
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
}

func TestCommandStats(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 10*time.Second)
	r := StartRedis(t)
	c := r.NewClient(t)
	if err := c.Ping(ctx).Err(); err != nil { // connection handshake before the reset
		t.Fatal(err)
	}
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := c.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := r.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st["set"] != 5 || st["eval"] != 0 || st["config|resetstat"] != 1 {
		t.Fatalf("after 5 SETs: %v", st)
	}

	const script = `redis.call('SET', KEYS[1], 'a'); redis.call('SET', KEYS[1], 'b');
redis.call('SET', KEYS[1], 'c'); return redis.call('GET', KEYS[1])`
	if v, err := c.Eval(ctx, script, []string{"s"}).Result(); err != nil || v != "c" {
		t.Fatalf("EVAL = %v, %v", v, err)
	}
	st, err = r.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st["set"] != 8 || st["eval"] != 1 || st["get"] != 1 || st["info"] != 1 {
		t.Fatalf("after EVAL with 3 redis.call SET + GET: %v", st)
	}

	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = r.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st["set"] != 0 {
		t.Fatalf("after ResetStats: %v", st)
	}
}

func TestStopIdempotent(t *testing.T) {
	t.Parallel()
	r, err := StartRedisServer(RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dir := r.proc.dir
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("temp dir %s still there: %v", dir, err)
	}
	if !refused(r.Addr()) {
		t.Fatal("server still accepts connections after Stop")
	}
	if err := r.Restart(); err == nil {
		t.Fatal("Restart after Stop succeeded")
	}
	if err := r.Pause(); err == nil {
		t.Fatal("Pause after Stop succeeded")
	}
}

func TestMissingBinary(t *testing.T) {
	t.Parallel()
	_, err := StartRedisServer(RedisConfig{Binary: "/nonexistent/redis-server"})
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y redis-server") {
		t.Fatalf("err = %v, want a hint naming the apt package", err)
	}
}

func TestServersDieWithTheirParent(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// TMPDIR: the helper dies without cleanup; its server's dir goes with ours.
	cmd.Env = append(os.Environ(), helperEnv+"=1", "TMPDIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper: %q, %v", line, err)
	}
	addr, pidStr, _ := strings.Cut(strings.TrimSpace(line), " ")
	pid, perr := strconv.Atoi(pidStr)
	if _, _, err := net.SplitHostPort(addr); err != nil || perr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper said %q", line)
	}
	if v, err := rawDo(ctxT(t, 5*time.Second), addr, "PING"); err != nil || v != "PONG" {
		t.Fatalf("helper's server: %v, %v", v, err)
	}
	// Crash the parent without any cleanup.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for !refused(addr) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server %s (pid %d) outlived its SIGKILLed parent", addr, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReplicaAndSentinel(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 60*time.Second)
	master := StartRedis(t)
	if _, err := master.Do(ctx, "SET", "before", "1"); err != nil {
		t.Fatal(err)
	}
	replica := StartReplica(t, master)
	if v, err := replica.Do(ctx, "GET", "before"); err != nil || v != "1" {
		t.Fatalf("replica GET before = %v, %v", v, err)
	}

	s := StartSentinel(t, master)
	if got, err := s.MasterAddr(ctx); err != nil || got != master.Addr() {
		t.Fatalf("sentinel master = %q, %v; want %q", got, err, master.Addr())
	}
	c := s.NewFailoverClient(t)
	if err := c.Set(ctx, "via-sentinel", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := master.Do(ctx, "GET", "via-sentinel"); err != nil || v != "x" {
		t.Fatalf("master GET via-sentinel = %v, %v", v, err)
	}

	start := time.Now()
	got, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("forced failover took %v", time.Since(start))
	if got != replica.Addr() {
		t.Fatalf("after failover sentinel says %q, want replica %q", got, replica.Addr())
	}
	err = waitFor(ctx, "replica promoted", func() (bool, error) {
		info, err := replica.Info(ctx, "replication")
		return err == nil && info["role"] == "master", err
	})
	if err != nil {
		t.Fatal(err)
	}
}
