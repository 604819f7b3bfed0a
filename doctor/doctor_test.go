package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// client returns a go-redis client for addr as user (admin when empty),
// closed in t.Cleanup.
func client(t *testing.T, addr, user string) *redis.Client {
	t.Helper()
	o := &redis.Options{
		Addr:                     addr,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if user != "" {
		o.Username, o.Password = user, "pw"
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// check runs Check within 30s and fails the test on an error.
func check(t *testing.T, rdb redis.UniversalClient, opts Options) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Check(ctx, rdb, opts)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return r
}

// want fails the test unless r's check name has status s and its detail
// contains every one of parts.
func want(t *testing.T, r Report, name string, s Status, parts ...string) {
	t.Helper()
	c, ok := r.Get(name)
	if !ok {
		t.Fatalf("no %s check in\n%s", name, dump(r))
	}
	if c.Status != s {
		t.Fatalf("%s is %s, want %s: %s\n%s", name, c.Status, s, c.Detail, dump(r))
	}
	for _, p := range parts {
		if !strings.Contains(c.Detail, p) {
			t.Fatalf("%s detail %q does not contain %q", name, c.Detail, p)
		}
	}
}

func dump(r Report) string {
	var b strings.Builder
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "  %-4s %-11s %s\n", c.Status, c.Name, c.Detail)
	}
	return b.String()
}

// names lists r's check names in order.
func names(r Report) string {
	var out []string
	for _, c := range r.Checks {
		out = append(out, c.Name)
	}
	return strings.Join(out, ",")
}

const standaloneNames = "version,mode,scripting,pubsub,keys,eviction,persistence,replicas"

// clean fails the test if a probe key or subscription is left on r.
func clean(t *testing.T, r *testenv.Redis) {
	t.Helper()
	ctx := context.Background()
	rdb := client(t, r.Addr(), "")
	keys, err := rdb.Keys(ctx, "*doctor:*").Result()
	if err != nil || len(keys) > 0 {
		t.Fatalf("keys left behind: %v %v", keys, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		chans, err := rdb.PubSubChannels(ctx, "*doctor:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(chans) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("channels still subscribed: %v", chans)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// aclLog returns r's ACL LOG entries as "reason object user" lines.
func aclLog(t *testing.T, r *testenv.Redis) []string {
	t.Helper()
	v, err := client(t, r.Addr(), "").Do(context.Background(), "acl", "log").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range v {
		m := parseHello(e)
		out = append(out, m["reason"]+" "+m["object"]+" "+m["username"])
	}
	return out
}

func setUser(t *testing.T, r *testenv.Redis, args ...any) {
	t.Helper()
	if _, err := r.Do(context.Background(), append([]any{"acl", "setuser"}, args...)...); err != nil {
		t.Fatal(err)
	}
}

// A healthy server without persistence: nothing fails, persistence warns
// with the restart and fencing explanation, and nothing is left behind.
func TestCheckHealthy(t *testing.T) {
	r := check(t, client(t, shared.Addr(), ""), Options{})
	if names(r) != standaloneNames {
		t.Fatalf("checks %s, want %s", names(r), standaloneNames)
	}
	if f := r.Failed(); len(f) > 0 || r.Status() != Warn {
		t.Fatalf("status %s, failed %v\n%s", r.Status(), f, dump(r))
	}
	want(t, r, NameVersion, OK, "redis 7", "minimum 6.2.0")
	want(t, r, NameMode, OK, "standalone master", "sharded pub/sub (SSUBSCRIBE) available")
	want(t, r, NameScripting, OK)
	want(t, r, NamePubSub, OK, "dlock:doctor:", "redisson_lock__channel:{dlock:doctor:", "delivered")
	want(t, r, NameKeys, OK, "dlock:doctor:", "lock names themselves")
	want(t, r, NameEviction, OK, "no maxmemory")
	want(t, r, NamePersistence, Warn, "no RDB save points, appendonly no", "restart empties every lock", "server clock")
	want(t, r, NameReplicas, OK, "connected replicas: 0")
	clean(t, shared)
}

// Persistence on (AOF, or RDB save points) is ok: the warning above is
// about the configuration, not a constant.
func TestCheckPersistenceOn(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--appendonly", "yes"}, "AOF on"},
		{[]string{"--save", "900 1"}, "RDB snapshots (save 900 1)"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			srv := testenv.StartRedis(t, testenv.WithArgs(tc.args...))
			r := check(t, client(t, srv.Addr(), ""), Options{})
			want(t, r, NamePersistence, OK, tc.want)
		})
	}
}

// maxmemory with any policy but noeviction fails, volatile-* included.
func TestCheckEviction(t *testing.T) {
	for _, tc := range []struct {
		maxmemory, policy string
		status            Status
		detail            string
	}{
		{"10mb", "allkeys-lru", Fail, "maxmemory-policy allkeys-lru"},
		{"10mb", "volatile-lru", Fail, "volatile-* policies evict them too"},
		{"10mb", "noeviction", OK, "with noeviction"},
		{"0", "allkeys-lru", OK, "no maxmemory"},
	} {
		t.Run(tc.maxmemory+"-"+tc.policy, func(t *testing.T) {
			srv := testenv.StartRedis(t, testenv.WithArgs("--maxmemory", tc.maxmemory, "--maxmemory-policy", tc.policy))
			r := check(t, client(t, srv.Addr(), ""), Options{})
			want(t, r, NameEviction, tc.status, tc.detail)
			if tc.status == Fail && r.Status() != Fail {
				t.Fatalf("report status %s, want fail", r.Status())
			}
		})
	}
}

// A user without scripting fails the scripting check, and only it.
func TestCheckNoScripting(t *testing.T) {
	srv := testenv.StartRedis(t)
	setUser(t, srv, "noscript", "on", ">pw", "~*", "&*", "+@all", "-@scripting")
	r := check(t, client(t, srv.Addr(), "noscript"), Options{})
	want(t, r, NameScripting, Fail, "EVAL denied for this user", "NOPERM")
	if f := r.Failed(); len(f) != 1 {
		t.Fatalf("failed %v, want the scripting check only\n%s", f, dump(r))
	}
	// Without scripting, the ACL cannot be asked: INFO and CONFIG were
	// sent, and this user may read them.
	want(t, r, NameEviction, OK, "no maxmemory")
	want(t, r, NamePersistence, Warn, "no RDB save points")
	clean(t, srv)
}

// The least-privilege user of issue 20, confined to ns:*: with the
// namespace nothing fails, what it may not read warns, and its ACL LOG
// stays empty (the server was asked, not refused). Without the namespace
// the keys and pub/sub checks fail.
func TestCheckRestrictedNamespace(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithArgs("--maxmemory", "10mb", "--maxmemory-policy", "volatile-lru"))
	setUser(t, srv, "svc", "on", ">pw", "resetkeys", "~ns:*", "resetchannels", "&ns:*", "+@all", "-@dangerous")
	if _, err := srv.Do(context.Background(), "acl", "log", "reset"); err != nil {
		t.Fatal(err)
	}
	rdb := client(t, srv.Addr(), "svc")

	r := check(t, rdb, Options{Namespace: "ns"})
	if f := r.Failed(); len(f) > 0 {
		t.Fatalf("failed %v\n%s", f, dump(r))
	}
	want(t, r, NameVersion, OK, "redis 7")
	want(t, r, NameScripting, OK)
	want(t, r, NamePubSub, OK, "ns:doctor:")
	want(t, r, NameKeys, OK, "ns:doctor:")
	// The server's volatile-lru stays unseen by this user: a warn, not a fail.
	want(t, r, NameEviction, Warn, "unreadable", "INFO not sent: the ACL denies it", "CONFIG not sent: the ACL denies it")
	want(t, r, NamePersistence, Warn, "unreadable", "restart empties every lock")
	want(t, r, NameReplicas, OK, "unknown")
	if log := aclLog(t, srv); len(log) != 0 {
		t.Fatalf("ACL LOG after the namespaced check: %v", log)
	}
	clean(t, srv)

	r = check(t, rdb, Options{})
	want(t, r, NamePubSub, Fail, "SUBSCRIBE", "denied for this user")
	want(t, r, NameKeys, Fail, "SET dlock:doctor:", "denied for this user")
	log := aclLog(t, srv)
	for _, e := range log {
		if !strings.HasPrefix(e, "channel ") && !strings.HasPrefix(e, "key ") {
			t.Fatalf("ACL LOG has %q: only the probe key and channel should be denied (%v)", e, log)
		}
	}
	if len(log) == 0 {
		t.Fatal("ACL LOG is empty after denied probes: the test proves nothing")
	}
	clean(t, srv)
}

// On 6.2 (no acl_check_cmd) a user denied INFO gets one refusal and no
// CONFIG: simulated here by a user that may not run scripts, so the
// server cannot be asked.
func TestCheckNoScriptingNoInfo(t *testing.T) {
	srv := testenv.StartRedis(t)
	setUser(t, srv, "svc", "on", ">pw", "resetkeys", "~ns:*", "resetchannels", "&ns:*", "+@all", "-@dangerous", "-@scripting")
	if _, err := srv.Do(context.Background(), "acl", "log", "reset"); err != nil {
		t.Fatal(err)
	}
	r := check(t, client(t, srv.Addr(), "svc"), Options{Namespace: "ns"})
	want(t, r, NameScripting, Fail)
	want(t, r, NameEviction, Warn, "INFO: NOPERM", "CONFIG not sent: INFO was denied")
	var info, config int
	for _, e := range aclLog(t, srv) {
		switch {
		case strings.HasPrefix(e, "command info "):
			info++
		case strings.HasPrefix(e, "command config"):
			config++
		}
	}
	if info != 1 || config != 0 {
		t.Fatalf("ACL LOG: %d INFO and %d CONFIG refusals, want 1 and 0: %v", info, config, aclLog(t, srv))
	}
}

// With a replica and Sentinel: the mode names Sentinel, WithReplicaAck(1)
// can be met and WithReplicaAck(2) cannot; without a replica, 1 cannot.
func TestCheckReplicasAndSentinel(t *testing.T) {
	master := testenv.StartRedis(t)
	testenv.StartReplica(t, master)
	sentinel := testenv.StartSentinel(t, master)

	direct := client(t, master.Addr(), "")
	r := check(t, direct, Options{ReplicaAck: 1})
	want(t, r, NameReplicas, OK, "1 replicas acknowledged", "connected replicas: 1", "WithReplicaAck(1) can be met")
	want(t, r, NameMode, OK, "managed by Sentinel (1 subscribed")

	r = check(t, direct, Options{ReplicaAck: 2, ReplicaTimeout: 200 * time.Millisecond})
	want(t, r, NameReplicas, Fail, "1 of 2 replicas acknowledged", "ErrNotReplicated")

	failover := sentinel.NewFailoverClient(t)
	r = check(t, failover, Options{ReplicaAck: 1})
	want(t, r, NameMode, OK, "through Sentinel (go-redis failover client)")
	want(t, r, NameReplicas, OK, "WithReplicaAck(1) can be met")

	lone := testenv.StartRedis(t)
	r = check(t, client(t, lone.Addr(), ""), Options{ReplicaAck: 1, ReplicaTimeout: 100 * time.Millisecond})
	want(t, r, NameReplicas, Fail, "0 of 1 replicas acknowledged", "connected replicas: 0")
	want(t, r, NameMode, OK, "standalone master;")
	clean(t, master)
}

// On a Cluster every master is probed (a key in its slots, its INFO); a
// master that stops answering fails the cluster check; a single-node
// client on a Cluster node fails the mode check.
func TestCheckCluster(t *testing.T) {
	c := testenv.StartCluster(t, 3)
	cc := c.NewClient(t)
	r := check(t, cc, Options{Namespace: "ns", ReplicaAck: 0})
	if got, wantNames := names(r), standaloneNames+",listing,cluster"; got != wantNames {
		t.Fatalf("checks %s, want %s", got, wantNames)
	}
	if f := r.Failed(); len(f) > 0 {
		t.Fatalf("failed %v\n%s", f, dump(r))
	}
	want(t, r, NameMode, OK, "Cluster, 3 masters (3 answering)")
	want(t, r, NameKeys, OK, "every master (3)")
	want(t, r, NameCluster, OK, "all 3 masters answer")
	for _, n := range c.Nodes() {
		clean(t, n)
	}

	r = check(t, client(t, c.Nodes()[0].Addr(), ""), Options{})
	want(t, r, NameMode, Fail, "Cluster node reached through a single-node client")

	if err := c.Nodes()[2].Kill(); err != nil {
		t.Fatal(err)
	}
	r = check(t, cc, Options{})
	want(t, r, NameCluster, Fail, "1 of 3 masters unreachable", c.Nodes()[2].Addr())
	want(t, r, NameMode, OK, "(2 answering)")
	want(t, r, NameKeys, OK, "every master (2)")
}

// A closed port: ErrUnreachable at once.
func TestCheckUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	start := time.Now()
	_, err = Check(context.Background(), client(t, addr, ""), Options{})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err %v, want ErrUnreachable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v", took)
	}
}

// A server that accepts and never answers: Check returns when ctx ends
// (deadline or cancel), well before go-redis's own 3s read timeout.
func TestCheckSilentServer(t *testing.T) {
	silent := testenv.NewSilentServer(t)
	for _, cancelled := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancel=%v", cancelled), func(t *testing.T) {
			rdb := client(t, silent.Addr(), "")
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if cancelled {
				ctx, cancel = context.WithCancel(context.Background())
				defer cancel()
				time.AfterFunc(300*time.Millisecond, cancel)
			}
			start := time.Now()
			_, err := Check(ctx, rdb, Options{})
			took := time.Since(start)
			wantErr := context.DeadlineExceeded
			if cancelled {
				wantErr = context.Canceled
			}
			if !errors.Is(err, ErrUnreachable) || !errors.Is(err, wantErr) {
				t.Fatalf("err %v, want ErrUnreachable and %v", err, wantErr)
			}
			if took < 250*time.Millisecond || took > time.Second {
				t.Fatalf("returned after %v, want about 300ms", took)
			}
		})
	}
}

// Redis stops answering in the middle of the checks (the proxy drops every
// byte once INFO, or PUBLISH with a subscription open, is sent): Check
// still returns when ctx ends, with the context's error; a reset
// connection is ErrUnreachable.
func TestCheckSilentMidway(t *testing.T) {
	srv := testenv.StartRedis(t)
	for _, tc := range []struct{ fault, on string }{{"blackhole", "info"}, {"blackhole", "publish"}, {"reset", "info"}} {
		fault := tc.fault
		t.Run(tc.fault+"-"+tc.on, func(t *testing.T) {
			proxy := testenv.NewFaultProxy(t, srv.Addr())
			rdb := client(t, proxy.Addr(), "")
			rdb.AddHook(faultHook{on: tc.on, do: func() {
				if fault == "blackhole" {
					proxy.Blackhole()
				} else {
					_ = proxy.Refuse()
					proxy.Reset()
				}
			}})
			d := 500 * time.Millisecond
			if fault == "reset" {
				d = 20 * time.Second // go-redis retries the dial before it gives up
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			start := time.Now()
			_, err := Check(ctx, rdb, Options{})
			took := time.Since(start)
			if fault == "blackhole" {
				if errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) || took < 400*time.Millisecond || took > 1500*time.Millisecond {
					t.Fatalf("err %v after %v: want the deadline, at about 500ms", err, took)
				}
				return
			}
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "lost contact") {
				t.Fatalf("err %v, want ErrUnreachable (lost contact)", err)
			}
		})
	}
}

// faultHook runs do before the first command named on.
type faultHook struct {
	on string
	do func()
}

func (h faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == h.on {
			h.do()
		}
		return next(ctx, cmd)
	}
}

// Invalid options and a nil client are refused before any network call.
func TestCheckInvalid(t *testing.T) {
	var dials atomic.Int32
	rdb := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:1",
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1)
			return nil, errors.New("no network in this test")
		},
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	defer rdb.Close()
	for _, o := range []Options{
		{Namespace: strings.Repeat("n", MaxNamespace+1)},
		{Namespace: "a{b}"},
		{Namespace: "a*"},
		{Namespace: "a?"},
		{Namespace: "a[b]"},
		{Namespace: "a b"},
		{Namespace: "a\tb"},
		{Namespace: "a\x00"},
		{Namespace: "\xff"},
		{Namespace: "x'..redis.call('set','pwned','1').ok..'"},
		{Namespace: `y\`},
		{Namespace: "a:b"},
		{ReplicaAck: -1},
		{ReplicaTimeout: -time.Second},
	} {
		if _, err := Check(context.Background(), rdb, o); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: err %v, want ErrInvalidArgument", o, err)
		}
	}
	if _, err := Check(context.Background(), nil, Options{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil client: err %v, want ErrInvalidArgument", err)
	}
	if n := dials.Load(); n != 0 {
		t.Fatalf("%d dials for invalid input", n)
	}
	// A valid namespace gets as far as the network.
	if _, err := Check(context.Background(), rdb, Options{Namespace: strings.Repeat("n", MaxNamespace)}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("valid namespace: err %v, want ErrUnreachable", err)
	}
	if dials.Load() == 0 {
		t.Fatal("a valid call did not dial: the test above proves nothing")
	}
}

func TestStatusJSON(t *testing.T) {
	in := Report{Checks: []Result{{NameVersion, OK, "a"}, {NameKeys, Warn, "b"}, {NameEviction, Fail, "c"}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"checks":[{"name":"version","status":"ok","detail":"a"},{"name":"keys","status":"warn","detail":"b"},{"name":"eviction","status":"fail","detail":"c"}]}`; string(b) != want {
		t.Fatalf("JSON %s, want %s", b, want)
	}
	var out Report
	if err := json.Unmarshal(b, &out); err != nil || fmt.Sprint(out) != fmt.Sprint(in) {
		t.Fatalf("round trip: %v %v", out, err)
	}
	if _, err := json.Marshal(Result{Status: Status(7)}); err == nil {
		t.Fatal("an unknown status was marshalled")
	}
	if in.Status() != Fail || len(in.Failed()) != 1 || in.Failed()[0].Name != NameEviction {
		t.Fatalf("Status %s Failed %v", in.Status(), in.Failed())
	}
}

func TestVersionCompare(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"6.2.0", true}, {"6.2.14", true}, {"7.0.15", true}, {"8.0.2", true}, {"10.0", true},
		{"6.0.20", false}, {"5.0.14", false}, {"6.1.9", false}, {"", false}, {"x.y", false},
	} {
		if got := atLeast(tc.v, MinVersion); got != tc.want {
			t.Errorf("atLeast(%q, %s) = %v", tc.v, MinVersion, got)
		}
	}
}
