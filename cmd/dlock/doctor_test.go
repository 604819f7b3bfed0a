package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/dlock-dev/dlock/doctor"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// noNS keeps a DLOCK_NAMESPACE of the developer's out of the child.
var noNS = []string{envNamespace + "="}

// doctorLines checks that stdout is one "ok|warn|fail  NAME  detail" line
// per check, in order, and returns each check's status by name.
func doctorLines(t *testing.T, r result, names ...string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != len(names) {
		t.Fatalf("%d lines, want %d (%v):\n%s", len(lines), len(names), names, r.stdout)
	}
	out := map[string]string{}
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != names[i] || (f[0] != "ok" && f[0] != "warn" && f[0] != "fail") {
			t.Fatalf("line %d %q: want \"ok|warn|fail %s detail\"", i+1, line, names[i])
		}
		out[f[1]] = f[0]
	}
	return out
}

var doctorNames = []string{"version", "mode", "scripting", "pubsub", "keys", "eviction", "persistence", "replicas"}

// nsDoctorNames are the checks under a namespace: the listing check too.
var nsDoctorNames = append(doctorNames[:len(doctorNames):len(doctorNames)], "listing")

// aclLogEmpty fails the test if r's ACL LOG has entries.
func aclLogEmpty(t *testing.T, r *testenv.Redis) {
	t.Helper()
	v, err := r.Do(context.Background(), "acl", "log")
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := v.([]any); !ok || len(l) != 0 {
		t.Fatalf("ACL LOG: %v", v)
	}
}

func TestDoctorHealthy(t *testing.T) {
	r := dlockRun(t, noNS, "--redis", redisURL(shared), "doctor")
	wantCode(t, r, 0)
	st := doctorLines(t, r, doctorNames...)
	if st["persistence"] != "warn" || st["version"] != "ok" || st["eviction"] != "ok" {
		t.Fatalf("statuses %v:\n%s", st, r.stdout)
	}
	if want := "doctor: Redis at " + shared.Addr() + ": usable; 1 of 8 checks warn: persistence\n"; r.stderr != want {
		t.Fatalf("stderr: %q, want %q", r.stderr, want)
	}
}

func TestDoctorJSON(t *testing.T) {
	r := dlockRun(t, []string{envNamespace + "=svc"}, "--redis", redisURL(shared), "doctor", "--json")
	wantCode(t, r, 0)
	var out doctorJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	if out.Redis != shared.Addr() || out.Namespace != "svc" || out.Status.String() != "warn" || len(out.Checks) != len(nsDoctorNames) {
		t.Fatalf("JSON %+v", out)
	}
	for i, c := range out.Checks {
		if c.Name != nsDoctorNames[i] || c.Detail == "" {
			t.Fatalf("check %d: %+v", i, c)
		}
	}
	if !strings.Contains(out.Checks[4].Detail, "svc:doctor:") {
		t.Fatalf("keys check ignored $%s: %+v", envNamespace, out.Checks[4])
	}
}

// maxmemory with allkeys-lru or volatile-lru: the eviction check fails,
// exit 1, and stderr names it.
func TestDoctorEviction(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		t.Run(policy, func(t *testing.T) {
			srv := testenv.StartRedis(t, testenv.WithArgs("--maxmemory", "10mb", "--maxmemory-policy", policy))
			r := dlockRun(t, noNS, "--redis", redisURL(srv), "doctor")
			wantCode(t, r, 1)
			st := doctorLines(t, r, doctorNames...)
			if st["eviction"] != "fail" || !strings.Contains(r.stdout, "maxmemory-policy "+policy) {
				t.Fatalf("statuses %v:\n%s", st, r.stdout)
			}
			oneLineErr(t, r, "1 check(s) failed: eviction")
		})
	}
}

func TestDoctorNoScripting(t *testing.T) {
	srv := testenv.StartRedis(t)
	if _, err := srv.Do(context.Background(), "acl", "setuser", "noscript", "on", ">pw", "~*", "&*", "+@all", "-@scripting"); err != nil {
		t.Fatal(err)
	}
	r := dlockRun(t, noNS, "--redis", "redis://noscript:pw@"+srv.Addr(), "doctor")
	wantCode(t, r, 1)
	if st := doctorLines(t, r, doctorNames...); st["scripting"] != "fail" {
		t.Fatalf("statuses %v:\n%s", st, r.stdout)
	}
	oneLineErr(t, r, "1 check(s) failed: scripting")
}

// The least-privilege user of issue 20 with its namespace (flag or
// environment): nothing fails, INFO and CONFIG warn, and ACL LOG stays
// empty. Without the namespace, keys and pub/sub fail.
func TestDoctorRestrictedNamespace(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.WithArgs("--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru"))
	if _, err := srv.Do(context.Background(), "acl", "setuser", "svc", "on", ">pw", "resetkeys", "~ns:*", "resetchannels", "&ns:*", "+@all", "-@dangerous"); err != nil {
		t.Fatal(err)
	}
	url := "redis://svc:pw@" + srv.Addr()
	for _, run := range [][]string{
		{"--redis", url, "doctor", "--namespace", "ns"},
		{"--redis", url, "doctor"}, // with DLOCK_NAMESPACE=ns
	} {
		r := dlockRun(t, []string{envNamespace + "=ns"}, run...)
		wantCode(t, r, 0)
		st := doctorLines(t, r, nsDoctorNames...)
		if st["eviction"] != "warn" || st["persistence"] != "warn" || st["keys"] != "ok" || st["pubsub"] != "ok" || st["listing"] != "warn" {
			t.Fatalf("statuses %v:\n%s", st, r.stdout)
		}
		aclLogEmpty(t, srv)
	}
	r := dlockRun(t, noNS, "--redis", url, "doctor")
	wantCode(t, r, 1)
	oneLineErr(t, r, "2 check(s) failed: pubsub, keys")
}

func TestDoctorUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	r := dlockRun(t, noNS, "--redis", "redis://"+addr, "doctor")
	wantCode(t, r, exitUnavailable)
	oneLineErr(t, r, "cannot reach Redis at "+addr)
	if r.stdout != "" {
		t.Fatalf("stdout: %q", r.stdout)
	}

	silent := testenv.NewSilentServer(t)
	r = dlockRun(t, noNS, "--redis", "redis://"+silent.Addr(), "doctor")
	wantCode(t, r, exitUnavailable)
	oneLineErr(t, r, "cannot reach Redis at "+silent.Addr())
}

// A bad namespace or flag is a usage error, found before any network call
// (the URL points at a closed port).
func TestDoctorUsage(t *testing.T) {
	for _, args := range [][]string{
		{"doctor", "--namespace", "a b"},
		{"doctor", "--namespace", "a{b}"},
		{"doctor", "--namespace", strings.Repeat("n", 65)},
		{"doctor", "--replica-ack", "-1"},
		{"doctor", "--timeout", "0s"},
		{"doctor", "extra"},
	} {
		r := dlockRun(t, noNS, append([]string{"--redis", "redis://127.0.0.1:1"}, args...)...)
		wantCode(t, r, exitUsage)
		if r.stdout != "" || strings.Contains(r.stderr, "cannot reach") {
			t.Fatalf("%v: stdout %q stderr %q", args, r.stdout, r.stderr)
		}
	}
	r := dlockRun(t, nil, "doctor", "--help")
	wantCode(t, r, 0)
	for _, want := range []string{"Examples:", "--namespace", "DLOCK_NAMESPACE", "69", "volatile-*", doctor.MinVersion} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("doctor --help lacks %q:\n%s", want, r.stdout)
		}
	}
}
