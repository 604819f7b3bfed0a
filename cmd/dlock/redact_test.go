package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// The secrets of the tests below: none may appear in any output.
const (
	secretPW    = "S3cretPW"
	secretToken = "S3cretTK"
)

func noSecret(t *testing.T, where, s string) {
	t.Helper()
	if strings.Contains(s, secretPW) || strings.Contains(s, secretToken) {
		t.Fatalf("%s shows a secret:\n%s", where, s)
	}
}

// redactURL hides the password of the user part and the values of query
// parameters that name a secret, and keeps the rest as written.
func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://admin:" + secretPW + "@10.0.0.5:6379/2":                           "redis://admin:xxxxx@10.0.0.5:6379/2",
		"redis://s:26379?master_name=m&password=" + secretPW + "&addr=s2:26379":    "redis://s:26379?master_name=m&password=xxxxx&addr=s2:26379",
		"redis://h:1?sentinel_password=" + secretPW + "&Auth_Token=" + secretToken: "redis://h:1?sentinel_password=xxxxx&Auth_Token=xxxxx",
		"http://user:" + secretPW + "@app:9464/metrics?token=" + secretToken:       "http://user:xxxxx@app:9464/metrics?token=xxxxx",
		"http://app:9464/metrics?api%5Fkey=" + secretToken + "&x=1":                "http://app:9464/metrics?api%5Fkey=xxxxx&x=1",
		"redis://only-user@h:1":       "redis://only-user@h:1",
		"redis://h:1?dial_timeout=3s": "redis://h:1?dial_timeout=3s",
		"redis://a:%zz@h:1":           "(unparsable URL)",
	} {
		if got := redactURL(raw); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

// A password in $DLOCK_REDIS_URL is not the help's flag default, and one
// in the URL's query (Sentinel's &password=, the form the help documents)
// is not in a "bad Redis URL" error.
func TestCredentialsNotInHelpOrErrors(t *testing.T) {
	env := []string{envRedisURL + "=redis://admin:" + secretPW + "@127.0.0.1:1"}
	for _, args := range [][]string{{"--help"}, {"inspect", "--help"}, {"dashboard", "--help"}, {"run", "--help"}} {
		res := dlockRun(t, env, args...)
		wantCode(t, res, 0)
		noSecret(t, strings.Join(args, " "), res.stdout+res.stderr)
		if !strings.Contains(res.stdout, `(default "redis://admin:xxxxx@127.0.0.1:1")`) {
			t.Fatalf("dlock %s: no redacted default:\n%s", strings.Join(args, " "), res.stdout)
		}
	}
	for _, u := range []string{
		"redis://127.0.0.1:1?master_name=m&password=" + secretPW + "&bogus=1", // Sentinel
		"redis://127.0.0.1:1?password=" + secretPW,                            // not an option of a plain URL
		"redis://u:" + secretPW + "@127.0.0.1:1/x",                            // bad database
		"redis://u:" + secretPW + "@127.0.0.1:1?master_name=",                 // empty master name
	} {
		res := dlockRun(t, nil, "--redis", u, "inspect", "x")
		wantCode(t, res, exitUsage)
		usageErr(t, res, "bad Redis URL")
		noSecret(t, u, res.stderr)
	}
	res := dlockRun(t, nil, "dashboard", "--metrics", "ftp://u:"+secretPW+"@app/metrics?token="+secretToken)
	wantCode(t, res, exitUsage)
	usageErr(t, res, "--metrics")
	noSecret(t, "--metrics error", res.stderr)
}

// dashboard --metrics with credentials in the URL scrapes with them, and
// shows them nowhere: not in the page, not in /api/locks, not in a scrape
// error (a refused login, a refused connection).
func TestDashboardMetricsCredentials(t *testing.T) {
	r := testenv.StartRedis(t)
	reg := prometheus.NewRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, r, dlock.WithObserver(obs))
	if err := c.WithLock(ctxT(t), "t-creds", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	prom := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != "user" || p != secretPW || req.URL.Query().Get("token") != secretToken {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		prom.ServeHTTP(w, req)
	})}
	ln := listenLoopback(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	closed := listenLoopback(t)
	closedAddr := closed.Addr().String()
	_ = closed.Close()

	get := func(u string) string {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, tc := range []struct {
		metrics string
		ok      bool
	}{
		{"http://user:" + secretPW + "@" + ln.Addr().String() + "/metrics?token=" + secretToken, true},
		{"http://user:wrong" + secretPW + "@" + ln.Addr().String() + "/metrics?token=" + secretToken, false},
		{"http://user:" + secretPW + "@" + closedAddr + "/metrics?token=" + secretToken, false},
	} {
		_, base := dashboardStart(t, r, "--metrics", tc.metrics)
		page := get(base)
		noSecret(t, "the page", page)
		if !strings.Contains(page, "user:xxxxx@") {
			t.Fatalf("the page does not name the endpoint:\n%s", page)
		}
		api := get(base + "api/locks")
		noSecret(t, "/api/locks", api)
		s := snapshotOf(t, base)
		if s.Metrics == nil || (s.Metrics.Error == "") != tc.ok || !strings.Contains(s.Metrics.URL, "user:xxxxx@") {
			t.Fatalf("%s: metrics %+v", tc.metrics, s.Metrics)
		}
	}
}
