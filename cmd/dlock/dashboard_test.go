package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockprom"
	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// chromiumPath finds Debian's chromium (make deps installs it), or
// $DLOCK_CHROMIUM.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DLOCK_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Fatal("the dashboard tests need a headless browser: install Debian's chromium (make deps does, as root) or set DLOCK_CHROMIUM")
	return ""
}

// browse loads url in a fresh headless Chromium and returns its stdout
// (the DOM with --dump-dom). The page's script runs: virtual time lets its
// fetches finish before the DOM is dumped.
func browse(t *testing.T, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=4000",
	}, args...)
	argv = append(argv, url)
	cmd := exec.CommandContext(ctx, chromiumPath(t), argv...)
	// Chromium forks helpers: put them in a group that is killed as a whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// dashboardStart starts dlock dashboard on a free port and returns its
// process and base URL.
func dashboardStart(t *testing.T, r *testenv.Redis, args ...string) (*started, string) {
	t.Helper()
	return dashboardAt(t, redisURL(r), args...)
}

// dashboardAt is dashboardStart for any --redis URL.
func dashboardAt(t *testing.T, u string, args ...string) (*started, string) {
	t.Helper()
	s := dlockStart(t, append([]string{"--redis", u, "dashboard", "--listen", "127.0.0.1:0"}, args...)...)
	select {
	case l, ok := <-s.lines:
		if !ok {
			t.Fatalf("dashboard exited: %s", s.stderrText())
		}
		m := regexp.MustCompile(`^dlock dashboard on (http://\S+/) `).FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("first line %q", l)
		}
		t.Cleanup(func() {
			_ = s.cmd.Process.Signal(syscall.SIGINT)
			if code := s.wait(t, 10*time.Second); code != 0 {
				t.Errorf("dashboard exit code %d after SIGINT; stderr: %s", code, s.stderrText())
			}
		})
		return s, m[1]
	case <-time.After(30 * time.Second):
		t.Fatal("dashboard printed no URL")
	}
	return nil, ""
}

// snapshotOf GETs /api/locks.
func snapshotOf(t *testing.T, base string) snapshot {
	t.Helper()
	resp, err := http.Get(base + "api/locks")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// lockScene holds locks with waiters in r through the library: a mutex with
// two queued waiters (other processes' clients), a read-held read-write lock,
// a hash-tagged name, and a free name with a fencing counter; plus keys that
// are not locks.
type lockScene struct {
	held, tagged, free *dlock.Mutex
	rwm                *dlock.RWMutex
	freeToken          uint64
	waitersDone        chan error
	letGo              chan struct{} // closed by close: granted waiters hold until then
	cancel             context.CancelFunc
}

func newScene(t *testing.T, r *testenv.Redis) *lockScene {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	c := newClient(t, r)
	sc := &lockScene{cancel: cancel, waitersDone: make(chan error, 2), letGo: make(chan struct{})}
	sc.held = c.Mutex("orders:settle")
	sc.tagged = c.Mutex("{order:7}:pay")
	sc.free = c.Mutex("t-dash-free")
	for _, m := range []*dlock.Mutex{sc.held, sc.tagged, sc.free} {
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sc.freeToken = sc.free.Token()
	if err := sc.free.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	sc.rwm = c.RWMutex("catalog")
	if err := sc.rwm.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		w := newClient(t, r).Mutex("orders:settle")
		go func() {
			ok, err := w.TryLock(ctx, 50*time.Second, 0)
			if ok {
				// Hold until the scene closes, so that a view taken after a
				// hand-off still sees the lock held.
				<-sc.letGo
				err = w.Unlock(context.Background())
			}
			sc.waitersDone <- err
		}()
	}
	rdb := r.NewClient(t)
	for rdb.LLen(ctx, keys.For("orders:settle").Queue).Val() != 2 {
		if ctx.Err() != nil {
			t.Fatal("waiters never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rdb.HSet(ctx, "user:1", "name", "bob", "email", "bob@example.com")
	rdb.Set(ctx, "plain", "x", time.Minute)
	t.Cleanup(sc.close)
	return sc
}

// close lets the waiters in and out, and releases the rest.
func (sc *lockScene) close() {
	ctx := context.Background()
	close(sc.letGo)
	_ = sc.held.Unlock(ctx)
	_ = sc.tagged.Unlock(ctx)
	_ = sc.rwm.RUnlock(ctx)
	for i := 0; i < 2; i++ {
		<-sc.waitersDone
	}
	sc.cancel()
}

// rowOf returns the DOM of the table row for lock name.
func rowOf(t *testing.T, dom, name string) string {
	t.Helper()
	re := regexp.MustCompile(`<tr data-name="` + regexp.QuoteMeta(name) + `">(.*?)</tr>`)
	m := re.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no row for %q in the rendered page:\n%s", name, dom)
	}
	return m[1]
}

func mustContain(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

// The page, rendered by a real browser running its script, shows each lock:
// name, kind, holders by host and pid, waiters, fencing token; and nothing
// for hashes that are not locks.
func TestDashboardPage(t *testing.T) {
	r := testenv.StartRedis(t)
	sc := newScene(t, r)
	_, base := dashboardStart(t, r, "--interval", "500ms")
	dom := browse(t, base, "--dump-dom")

	host := regexp.QuoteMeta(hostOf(t, sc.held.Owner()))
	pid := strconv.Itoa(os.Getpid())
	row := rowOf(t, dom, "orders:settle")
	mustContain(t, "orders:settle row", row, ">mutex<", `badge held`, ">2 waiting<", ">"+strconv.FormatUint(sc.held.Token(), 10)+"<")
	if !regexp.MustCompile(`class="holder"[^>]*>` + host + ` · pid ` + pid + `<`).MatchString(row) {
		t.Fatalf("holder host/pid not shown:\n%s", row)
	}
	if n := strings.Count(row, `class="waiter"`); n != 2 || !strings.Contains(row, "#1 "+hostOf(t, sc.held.Owner())+" · pid "+pid) {
		t.Fatalf("%d waiters listed:\n%s", n, row)
	}
	mustContain(t, "catalog row", rowOf(t, dom, "catalog"), "rwlock (read)", "badge held", " · pid "+pid)
	mustContain(t, "tagged row", rowOf(t, dom, "{order:7}:pay"), "badge held", ">"+strconv.FormatUint(sc.tagged.Token(), 10)+"<")
	mustContain(t, "free row", rowOf(t, dom, "t-dash-free"), "badge free", ">"+strconv.FormatUint(sc.freeToken, 10)+"<")
	for _, notLock := range []string{"user:1", "plain", "dlock:"} {
		if strings.Contains(dom, `data-name="`+notLock) {
			t.Fatalf("%q shown as a lock:\n%s", notLock, dom)
		}
	}
	mustContain(t, "summary", dom, `id="count-held" class="value">3<`, `id="count-waiters" class="value">2<`, `id="count-locks" class="value">4<`)
	// Read-only: no unlock button.
	if strings.Contains(dom, "Force unlock") {
		t.Fatal("read-only page offers force unlock")
	}
}

// A screenshot of the page is neither blank nor broken: the right size,
// many colours, and the held and free badges drawn (they exist only once
// the script has rendered rows).
func TestDashboardScreenshot(t *testing.T) {
	r := testenv.StartRedis(t)
	newScene(t, r)
	_, base := dashboardStart(t, r, "--interval", "500ms")
	shot := filepath.Join(t.TempDir(), "page.png")
	browse(t, base, "--screenshot="+shot, "--window-size=1200,800")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 800 {
		t.Fatalf("screenshot %v, want 1200x800", b)
	}
	colours := map[[3]uint32]int{}
	near := func(c [3]uint32, r, g, b uint32) bool {
		d := func(x, y uint32) uint32 {
			if x > y {
				return x - y
			}
			return y - x
		}
		return d(c[0], r) < 8 && d(c[1], g) < 8 && d(c[2], b) < 8
	}
	held, free := 0, 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			c := [3]uint32{r >> 8, g >> 8, b >> 8}
			colours[c]++
			if near(c, 0xc2, 0x41, 0x0c) {
				held++
			}
			if near(c, 0x15, 0x80, 0x3d) {
				free++
			}
		}
	}
	if len(colours) < 20 {
		t.Fatalf("screenshot has %d colours: blank or broken", len(colours))
	}
	// Three held badges and one free one, each some 40x18 pixels.
	if held < 3*300 || free < 300 {
		t.Fatalf("badges not drawn: %d held-colour and %d free-colour pixels", held, free)
	}
}

// Force unlock from the page: only with --allow-unlock, only a POST with the
// page's CSRF token, a JSON body and a same-origin Origin; it hands the lock
// to the next waiter and says so.
func TestDashboardUnlock(t *testing.T) {
	r := testenv.StartRedis(t)
	sc := newScene(t, r)
	_, ro := dashboardStart(t, r)
	_, rw := dashboardStart(t, r, "--allow-unlock")

	token := func(base string) string {
		resp, err := http.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if h := resp.Header.Get("X-Frame-Options"); h != "DENY" {
			t.Fatalf("X-Frame-Options %q", h)
		}
		m := regexp.MustCompile(`name="dlock-csrf" content="([0-9a-f]{64})"`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no CSRF token in the page:\n%s", b)
		}
		return string(m[1])
	}
	post := func(base, tok, origin, ctype, name string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"api/unlock", strings.NewReader(`{"name":`+strconv.Quote(name)+`}`))
		if tok != "" {
			req.Header.Set(csrfHeader, tok)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		req.Header.Set("Content-Type", ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Message string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Message
	}
	const js = "application/json"
	origin := strings.TrimSuffix(rw, "/")
	tok := token(rw)
	for _, tc := range []struct {
		base, tok, origin, ctype string
		code                     int
	}{
		{ro, token(ro), "", js, http.StatusForbidden},              // read-only
		{rw, "", "", js, http.StatusForbidden},                     // no token
		{rw, token(ro), "", js, http.StatusForbidden},              // another server's token
		{rw, tok, "http://evil.example", js, http.StatusForbidden}, // cross-origin
		{rw, tok, origin, "text/plain", http.StatusUnsupportedMediaType},
	} {
		if code, msg := post(tc.base, tc.tok, tc.origin, tc.ctype, "orders:settle"); code != tc.code {
			t.Fatalf("%+v: %d %q, want %d", tc, code, msg, tc.code)
		}
	}
	if locked, _ := sc.held.IsLocked(ctxT(t)); !locked {
		t.Fatal("a refused request unlocked the lock")
	}
	// A DNS-rebound name is refused outright.
	req, _ := http.NewRequest(http.MethodGet, rw, nil)
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("foreign Host: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// The page offers the button on held locks only.
	dom := browse(t, rw, "--dump-dom")
	if !strings.Contains(rowOf(t, dom, "orders:settle"), "Force unlock") || strings.Contains(rowOf(t, dom, "t-dash-free"), "Force unlock") {
		t.Fatalf("unlock buttons:\n%s", dom)
	}

	before := snapshotOf(t, rw).Seq
	code, msg := post(rw, tok, origin, js, "orders:settle")
	hp := hostOf(t, sc.held.Owner()) + " pid " + strconv.Itoa(os.Getpid())
	if code != http.StatusOK || msg != "orders:settle was held by "+hp+": released it; handed it to the next waiter, now held by "+hp {
		t.Fatalf("unlock: %d %q", code, msg)
	}
	select {
	case <-sc.held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder never learned of the forced unlock")
	}
	// The next view is fresh, not the cached one.
	if s := snapshotOf(t, rw); s.Seq == before {
		t.Fatalf("snapshot not refreshed after the unlock: %+v", s)
	}
	if code, msg := post(rw, tok, origin, js, strings.Repeat("x", 2000)); code != http.StatusBadRequest || len(msg) > maxMessage+40 {
		t.Fatalf("huge name: %d %q", code, msg)
	}
}

// However many browsers poll, Redis is scanned at most once per interval;
// the JSON says what a refresh cost.
func TestDashboardCache(t *testing.T) {
	r := testenv.StartRedis(t)
	newScene(t, r)
	_, base := dashboardStart(t, r, "--interval", "1h")
	var wg sync.WaitGroup
	seqs := make(chan int64, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(base + "api/locks")
			if err != nil {
				seqs <- -1
				return
			}
			defer resp.Body.Close()
			var s snapshot
			_ = json.NewDecoder(resp.Body).Decode(&s)
			seqs <- s.Seq
		}()
	}
	wg.Wait()
	close(seqs)
	for s := range seqs {
		if s != 1 {
			t.Fatalf("refresh #%d: want every request served by refresh #1", s)
		}
	}
	s := snapshotOf(t, base)
	// 4 locks: 4 SCAN calls (hashes, fencing counters, semaphores,
	// latches: one page each), a probe per hash (3 lock hashes and user:1),
	// 8 commands per lock.
	if s.Cost.Scans != 4 || s.Cost.Probes != 4 || s.Cost.Inspect != 4*inspectCommands || s.Cost.Reads != 4 || s.Commands != 4+4+32 || len(s.Locks) != 4 {
		t.Fatalf("cost %+v, %d commands, %d locks", s.Cost, s.Commands, len(s.Locks))
	}
	// The server's own count agrees (SCAN, HRANDFIELD, MULTI blocks).
	stats, err := r.CommandStats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if stats["scan"] != 4 || stats["hrandfield"] != 4 {
		t.Fatalf("server ran %d SCAN and %d HRANDFIELD", stats["scan"], stats["hrandfield"])
	}
}

// With --metrics the page shows the application's grant rate from
// dlockprom's counters.
func TestDashboardMetrics(t *testing.T) {
	r := testenv.StartRedis(t)
	reg := prometheus.NewRegistry()
	obs, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	ln := listenLoopback(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	c := newClient(t, r, dlock.WithObserver(obs))
	ctx, cancel := context.WithCancel(context.Background())
	busy := make(chan struct{})
	go func() { // the application, taking a lock in a loop
		defer close(busy)
		for ctx.Err() == nil {
			_ = c.WithLock(ctx, "t-metrics", func(context.Context) error { time.Sleep(time.Millisecond); return nil })
		}
	}()
	defer func() { cancel(); <-busy }()

	_, base := dashboardStart(t, r, "--interval", "500ms", "--metrics", "http://"+ln.Addr().String()+"/metrics")
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := snapshotOf(t, base)
		if s.Metrics != nil && s.Metrics.Error != "" {
			t.Fatalf("metrics: %s", s.Metrics.Error)
		}
		if s.Metrics != nil && s.Metrics.Ready && s.Metrics.GrantsPerSec > 0 && s.Metrics.GrantsPerSecByKind["mutex"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no grant rate: %+v", s.Metrics)
		}
		time.Sleep(100 * time.Millisecond)
	}
	dom := browse(t, base, "--dump-dom")
	m := regexp.MustCompile(`id="m-grants" class="value">([0-9.]+)<`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("grant rate not rendered:\n%s", dom)
	}
	if v, _ := strconv.ParseFloat(m[1], 64); v <= 0 {
		t.Fatalf("grant rate %s", m[1])
	}
	// An endpoint without dlock metrics is reported, not fatal.
	_, base2 := dashboardStart(t, r, "--metrics", base+"static/style.css")
	if s := snapshotOf(t, base2); s.Metrics == nil || s.Metrics.Error == "" {
		t.Fatalf("%+v", s.Metrics)
	}
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// The page shows semaphores (size, permits held by weight, free, holders
// with their weight, waiters) and latches (count, TTL) beside the locks,
// offers no force unlock for them, and counts their reads in the cost.
func TestDashboardSemaphoresAndLatches(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := ctxT(t)
	c := newClient(t, r)
	s := c.Semaphore("pool:gpu", 5)
	p3, err := s.AcquireN(ctx, 3, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Release(context.Background())
	p1, err := s.Acquire(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Release(context.Background())
	bg, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		if p, err := newClient(t, r).Semaphore("pool:gpu", 5).AcquireN(bg, 2, 50*time.Second, 0); err == nil {
			_ = p.Release(context.Background())
		}
	}()
	rdb := r.NewClient(t)
	for rdb.LLen(ctx, keys.Semaphore("pool:gpu").Queue).Val() != 1 {
		if ctx.Err() != nil {
			t.Fatal("the semaphore's waiter never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	l := c.CountDownLatch("import:shards")
	if ok, err := l.TrySetCount(ctx, 3, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	m := c.Mutex("orders:settle")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Unlock(context.Background())

	_, base := dashboardStart(t, r, "--interval", "500ms", "--allow-unlock")
	dom := browse(t, base, "--dump-dom")
	sem := rowOf(t, dom, "pool:gpu")
	mustContain(t, "pool:gpu row", sem, ">semaphore<", "badge held", ">4 of 5 held · 1 free<", " · ×3", ">1 waiting<", `class="waiter"`)
	latch := rowOf(t, dom, "import:shards")
	mustContain(t, "import:shards row", latch, ">latch<", ">count 2<")
	if !regexp.MustCompile(`class="ttl num">[0-9.]+ s<`).MatchString(latch) {
		t.Fatalf("the latch's TTL is not shown:\n%s", latch)
	}
	for _, row := range []string{sem, latch} {
		if strings.Contains(row, "Force unlock") {
			t.Fatalf("force unlock offered for a semaphore or latch:\n%s", row)
		}
	}
	mustContain(t, "orders:settle row", rowOf(t, dom, "orders:settle"), "Force unlock")
	mustContain(t, "summary", dom, `id="count-locks" class="value">3<`, `id="count-held" class="value">3<`)

	snap := snapshotOf(t, base)
	if snap.Cost.Reads != 3 || snap.Cost.Inspect != inspectCommands+semaphoreCommands+latchCommands {
		t.Fatalf("cost %+v", snap.Cost)
	}
	for _, e := range snap.Locks {
		if e.Type == "semaphore" && (e.Permits != 5 || e.Taken != 4 || e.Free != 1) {
			t.Fatalf("semaphore %+v", e)
		}
		if e.Type == "latch" && (e.Count != 2 || e.TTLms <= 0) {
			t.Fatalf("latch %+v", e)
		}
	}
	stop()
}
