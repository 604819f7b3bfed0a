package testenv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The SQL servers are checked with the command-line clients that come with
// them (mariadb, psql), so that this package needs no SQL driver.

func mariadbQuery(t *testing.T, m *MariaDB, query string) string {
	t.Helper()
	out, err := exec.Command("mariadb", "--no-defaults", "--protocol=tcp", "-h127.0.0.1",
		"-P"+strconv.Itoa(m.Port()), "-uroot", "-N", "-B", MariaDBDatabase, "-e", query).CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb -e %q: %v\n%s", query, err, out)
	}
	return strings.TrimSpace(string(out))
}

func psqlQuery(t *testing.T, p *Postgres, query string) string {
	t.Helper()
	out, err := exec.Command("psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", p.DSN(), "-c", query).CombinedOutput()
	if err != nil {
		t.Fatalf("psql -c %q: %v\n%s", query, err, out)
	}
	return strings.TrimSpace(string(out))
}

// processUID returns the real uid of pid from /proc.
func processUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid, err := strconv.Atoi(strings.Fields(rest)[0])
			if err != nil {
				t.Fatal(err)
			}
			return uid
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return -1
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// sqlHelperMain starts a server of kind, prints "addr pid dir" and waits to
// be killed (TestSQLServersDieWithTheirParent).
func sqlHelperMain(kind string) {
	var addr, dir string
	var pid int
	switch kind {
	case "mariadb":
		m, err := StartMariaDBServer(MariaDBConfig{})
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		addr, pid, dir = m.Addr(), m.PID(), filepath.Dir(m.Socket())
	default:
		p, err := StartPostgresServer(PostgresConfig{})
		if err != nil {
			fmt.Println("ERROR", err)
			os.Exit(1)
		}
		addr, pid, dir = p.Addr(), p.PID(), p.SocketDir()
	}
	fmt.Println(addr, pid, dir)
	time.Sleep(time.Minute) // killed by the parent long before
	os.Exit(2)
}

// TestMariaDBStartQuery: a private server on a free loopback port (never
// 3306), root without password, the dlock database, the speed settings.
func TestMariaDBStartQuery(t *testing.T) {
	t.Parallel()
	start := time.Now()
	m := StartMariaDB(t)
	t.Logf("mariadbd ready in %v", time.Since(start))

	host, port, err := net.SplitHostPort(m.Addr())
	if err != nil || host != "127.0.0.1" || port == "3306" || port != strconv.Itoa(m.Port()) {
		t.Fatalf("Addr() = %q, Port() = %d", m.Addr(), m.Port())
	}
	if want := "root@tcp(" + m.Addr() + ")/dlock?parseTime=true&x=1"; m.DSN("parseTime=true", "x=1") != want {
		t.Fatalf("DSN = %q, want %q", m.DSN("parseTime=true", "x=1"), want)
	}
	got := mariadbQuery(t, m, "SELECT DATABASE(), @@port, @@bind_address, @@log_bin, @@innodb_flush_log_at_trx_commit, @@datadir, @@socket")
	f := strings.Split(got, "\t")
	if len(f) != 7 || f[0] != "dlock" || f[1] != port || f[2] != "127.0.0.1" || f[3] != "0" || f[4] != "2" {
		t.Fatalf("server variables = %q", got)
	}
	dir := filepath.Dir(m.Socket())
	if !strings.HasPrefix(f[5], dir) || f[6] != m.Socket() {
		t.Fatalf("datadir %q / socket %q not in the private dir %q", f[5], f[6], dir)
	}
	// The socket works too, and KILL is allowed (tests kill sessions).
	out, err := exec.Command("mariadb", "--no-defaults", "-S", m.Socket(), "-uroot", "-N", "-B", "-e",
		"SELECT COUNT(*) FROM information_schema.user_privileges WHERE privilege_type IN ('SUPER', 'CONNECTION ADMIN') AND grantee LIKE '''root''@%'").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) == "0" {
		t.Fatalf("root over the socket: %q, %v", out, err)
	}
	if err := m.Ready(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestMariaDBKillRestartPauseStop: the lifecycle a test needs to break its
// own server: Kill refuses connections, Restart comes back on the same
// port with the data, Pause stops answering without refusing, Stop removes
// everything and is idempotent.
func TestMariaDBKillRestartPauseStop(t *testing.T) {
	t.Parallel()
	m := StartMariaDB(t)
	addr, pid := m.Addr(), m.PID()
	mariadbQuery(t, m, "CREATE TABLE t (v INT); INSERT INTO t VALUES (42)")

	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	if !refused(addr) || m.PID() != 0 {
		t.Fatalf("killed server: refused=%v pid=%d", refused(addr), m.PID())
	}
	start := time.Now()
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("mariadbd restart (crash recovery) in %v", time.Since(start))
	if m.Addr() != addr || m.PID() == pid || m.PID() == 0 {
		t.Fatalf("after restart: addr %q pid %d (was %q, %d)", m.Addr(), m.PID(), addr, pid)
	}
	if got := mariadbQuery(t, m, "SELECT v FROM t"); got != "42" {
		t.Fatalf("data after restart = %q", got)
	}

	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := m.Ready(ctx)
	cancel()
	if err == nil {
		t.Fatal("a paused server greeted a client")
	}
	if refused(addr) {
		t.Fatal("a paused server refused the connection")
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := m.Ready(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("after Resume: %v", err)
	}

	dir := filepath.Dir(m.Socket())
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("temp dir %s still there: %v", dir, err)
	}
	if !refused(addr) || m.Restart() == nil || m.Kill() == nil {
		t.Fatal("a stopped server can still be used")
	}
}

// TestPostgresStartQuery: a private server on a free loopback port (never
// 5432), run as an unprivileged user when we are root, fsync off.
func TestPostgresStartQuery(t *testing.T) {
	t.Parallel()
	start := time.Now()
	p := StartPostgres(t)
	t.Logf("postgres ready in %v", time.Since(start))

	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil || host != "127.0.0.1" || port == "5432" || port != strconv.Itoa(p.Port()) {
		t.Fatalf("Addr() = %q, Port() = %d", p.Addr(), p.Port())
	}
	if want := "postgres://postgres@" + p.Addr() + "/postgres?sslmode=disable&application_name=x"; p.DSN("application_name=x") != want {
		t.Fatalf("DSN = %q, want %q", p.DSN("application_name=x"), want)
	}
	got := psqlQuery(t, p, "SELECT current_user, current_database(), current_setting('port'), current_setting('listen_addresses'), current_setting('fsync'), current_setting('data_directory'), current_setting('unix_socket_directories')")
	f := strings.Split(got, "|")
	if len(f) != 7 || f[0] != "postgres" || f[1] != "postgres" || f[2] != port || f[3] != "127.0.0.1" || f[4] != "off" {
		t.Fatalf("server settings = %q", got)
	}
	if !strings.HasPrefix(f[5], p.SocketDir()) || f[6] != p.SocketDir() {
		t.Fatalf("data %q / socket dir %q not in the private dir %q", f[5], f[6], p.SocketDir())
	}
	if os.Geteuid() == 0 {
		if uid := processUID(t, p.PID()); uid == 0 {
			t.Fatal("postgres runs as root")
		}
	}
	if err := p.Ready(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresKillRestartPauseStop: as for MariaDB.
func TestPostgresKillRestartPauseStop(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t)
	addr, pid := p.Addr(), p.PID()
	psqlQuery(t, p, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)")

	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if !refused(addr) || p.PID() != 0 {
		t.Fatalf("killed server: refused=%v pid=%d", refused(addr), p.PID())
	}
	start := time.Now()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("postgres restart (crash recovery) in %v", time.Since(start))
	if p.Addr() != addr || p.PID() == pid || p.PID() == 0 {
		t.Fatalf("after restart: addr %q pid %d (was %q, %d)", p.Addr(), p.PID(), addr, pid)
	}
	if got := psqlQuery(t, p, "SELECT v FROM t"); got != "42" {
		t.Fatalf("data after restart = %q", got)
	}

	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := p.Ready(ctx)
	cancel()
	if err == nil {
		t.Fatal("a paused server accepted a session")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := p.Ready(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("after Resume: %v", err)
	}

	dir := p.SocketDir()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("temp dir %s still there: %v", dir, err)
	}
	if !refused(addr) || p.Restart() == nil {
		t.Fatal("a stopped server can still be used")
	}
}

// TestSQLServersDieWithTheirParent: a crashed test binary takes its
// mariadbd and postgres (postmaster and backends) with it.
func TestSQLServersDieWithTheirParent(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mariadb", "postgres"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+kind)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		f := strings.Fields(line)
		if len(f) != 3 {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("%s helper said %q (%v)", kind, line, err)
		}
		addr, dir := f[0], f[2]
		pid, perr := strconv.Atoi(f[1])
		// The helper dies without cleanup: its server's dir is ours to remove.
		t.Cleanup(func() { removeServerDir(dir, 5*time.Second) })
		if _, _, aerr := net.SplitHostPort(addr); aerr != nil || perr != nil || !strings.Contains(dir, "dlock-"+kind) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("%s helper said %q", kind, line)
		}
		if refused(addr) {
			t.Fatalf("%s helper's server does not listen", kind)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		deadline := time.Now().Add(10 * time.Second)
		for !refused(addr) || alive(pid) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				t.Fatalf("%s %s (pid %d) outlived its SIGKILLed parent", kind, addr, pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
