package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// dashboardRequest sends one request to the dashboard listening on port of
// 127.0.0.1, as if to host (the Host header), with origin when not "" and
// the CSRF token when not "". It returns the status and the body.
func dashboardRequest(t *testing.T, method, port, host, path, origin, csrf, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://127.0.0.1:"+port+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if csrf != "" {
		req.Header.Set(csrfHeader, csrf)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfMeta = regexp.MustCompile(`name="dlock-csrf" content="([0-9a-f]{64})"`)

// The review's attack on a dashboard beyond loopback, a DNS-rebound name
// (Host: evil.example) reading the page's CSRF token and unlocking with
// its own Origin, and what stops it: such a listener does not start
// without --allow-host; then every request whose Host is not on the list
// is refused (421), the page and its token included; and an unlock must
// come with an Origin on the list, not merely the request's own Host.
func TestDashboardBeyondLoopback(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := ctxT(t)

	res := dlockRun(t, nil, "--redis", redisURL(r), "dashboard", "--listen", "0.0.0.0:0", "--allow-unlock")
	wantCode(t, res, exitUsage)
	usageErr(t, res, "--allow-host")
	for _, bad := range []string{"http://dash.example/", "dash.example/x", "", "dash.example:http"} {
		res := dlockRun(t, nil, "--redis", redisURL(r), "dashboard", "--listen", "0.0.0.0:0", "--allow-host", bad)
		wantCode(t, res, exitUsage)
		usageErr(t, res, "--allow-host")
	}

	m := newClient(t, r).Mutex("t-beyond")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(ctx)
	_, base := dashboardStart(t, r, "--listen", "0.0.0.0:0", "--allow-unlock", "--allow-host", "Dash.Example.", "--allow-host", "10.1.2.3:8443")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	if u.Hostname() != "dash.example" {
		t.Fatalf("the dashboard names itself %s, not by an allowed host", base)
	}
	good, evil := "dash.example:"+port, "evil.example:"+port
	code, page := dashboardRequest(t, http.MethodGet, port, good, "/", "", "", "")
	tok := csrfMeta.FindStringSubmatch(page)
	if code != http.StatusOK || tok == nil {
		t.Fatalf("allowed host: %d\n%s", code, page)
	}
	unlock := `{"name":"t-beyond"}`
	for _, tc := range []struct {
		method, host, path, origin, csrf string
		code                             int
	}{
		{http.MethodGet, evil, "/", "", "", http.StatusMisdirectedRequest},
		{http.MethodGet, evil, "/api/locks", "", "", http.StatusMisdirectedRequest},
		{http.MethodGet, evil, "/static/app.js", "", "", http.StatusMisdirectedRequest},
		{http.MethodPost, evil, "/api/unlock", "http://" + evil, tok[1], http.StatusMisdirectedRequest},
		{http.MethodGet, "127.0.0.1:" + port, "/", "", "", http.StatusMisdirectedRequest}, // not on the list
		{http.MethodGet, "10.1.2.3:" + port, "/", "", "", http.StatusMisdirectedRequest},  // the list's port only
		{http.MethodGet, "10.1.2.3:8443", "/api/locks", "", "", http.StatusOK},
		{http.MethodGet, "DASH.example.:" + port, "/api/locks", "", "", http.StatusOK},
		{http.MethodPost, good, "/api/unlock", "http://" + evil, tok[1], http.StatusForbidden},
		{http.MethodPost, good, "/api/unlock", "null", tok[1], http.StatusForbidden},
		{http.MethodPost, good, "/api/unlock", "ftp://" + good, tok[1], http.StatusForbidden},
		{http.MethodPost, good, "/api/unlock", "http://" + good, "", http.StatusForbidden},
	} {
		code, body := dashboardRequest(t, tc.method, port, tc.host, tc.path, tc.origin, tc.csrf, unlock)
		if code != tc.code {
			t.Fatalf("%s %s Host %s Origin %q: %d %s, want %d", tc.method, tc.path, tc.host, tc.origin, code, body, tc.code)
		}
		if csrfMeta.MatchString(body) && tc.code != http.StatusOK {
			t.Fatalf("a refused request got the CSRF token: %s", body)
		}
	}
	if locked, err := m.IsLocked(ctx); !locked || err != nil {
		t.Fatalf("a refused request unlocked the lock: %v %v", locked, err)
	}
	// The page's own request: its Host and Origin are on the list (behind a
	// TLS proxy the Origin is https).
	code, body := dashboardRequest(t, http.MethodPost, port, good, "/api/unlock", "https://"+good, tok[1], unlock)
	var reply struct{ Message string }
	_ = json.Unmarshal([]byte(body), &reply)
	if code != http.StatusOK || !strings.Contains(reply.Message, "released it") {
		t.Fatalf("allowed unlock: %d %s", code, body)
	}
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder never learned of the forced unlock")
	}
}

// A loopback dashboard answers loopback names on any port (an SSH tunnel's
// included) and the --allow-host names (a local reverse proxy's), and its
// unlock takes an Origin from that list only.
func TestDashboardLoopbackHosts(t *testing.T) {
	r := testenv.StartRedis(t)
	_, base := dashboardStart(t, r, "--allow-unlock", "--allow-host", "proxy.example")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Fatalf("a loopback dashboard names itself %s", base)
	}
	port := u.Port()
	_, page := dashboardRequest(t, http.MethodGet, port, "127.0.0.1:"+port, "/", "", "", "")
	tok := csrfMeta.FindStringSubmatch(page)
	if tok == nil {
		t.Fatalf("no token:\n%s", page)
	}
	for _, tc := range []struct {
		method, host, origin string
		code                 int
	}{
		{http.MethodGet, "localhost:9000", "", http.StatusOK},
		{http.MethodGet, "[::1]:" + port, "", http.StatusOK},
		{http.MethodGet, "proxy.example", "", http.StatusOK},
		{http.MethodGet, "evil.example:" + port, "", http.StatusMisdirectedRequest},
		{http.MethodPost, "127.0.0.1:" + port, "http://evil.example:" + port, http.StatusForbidden},
		// An allowed Origin reaches the unlock itself: no such lock here.
		{http.MethodPost, "proxy.example", "https://proxy.example", http.StatusOK},
		{http.MethodPost, "127.0.0.1:" + port, "http://localhost:" + port, http.StatusOK},
	} {
		path := "/"
		if tc.method == http.MethodPost {
			path = "/api/unlock"
		}
		code, body := dashboardRequest(t, tc.method, port, tc.host, path, tc.origin, tok[1], `{"name":"t-loopback-none"}`)
		if code != tc.code {
			t.Fatalf("%s Host %s Origin %q: %d %s, want %d", tc.method, tc.host, tc.origin, code, body, tc.code)
		}
	}
}
