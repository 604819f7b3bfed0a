package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/internal/keys"
)

//go:embed web
var webFS embed.FS

// Dashboard limits.
const (
	minInterval      = 500 * time.Millisecond
	maxInterval      = time.Hour
	defaultInterval  = 2 * time.Second
	defaultMaxLocks  = 200
	maxMaxLocks      = 10000
	refreshTimeout   = 10 * time.Second
	csrfHeader       = "X-Dlock-Csrf"
	dashboardHeading = "dlock dashboard"
)

type dashboardFlags struct {
	space       keys.Space // --namespace
	listen      string
	interval    time.Duration
	maxLocks    int
	metricsURL  string
	allowUnlock bool
	allowHosts  []string // --allow-host, as given
	hosts       hostList // built from allowHosts and the listener
}

func (a *app) dashboardCommand() *cobra.Command {
	var f dashboardFlags
	cmd := &cobra.Command{
		Use:   "dashboard [--listen ADDR [--allow-host HOST]...] [--interval D] [--metrics URL] [--allow-unlock]",
		Short: "Serve a live web view of the locks in Redis",
		Long: `dashboard serves a web page (self-contained: no external assets, works
offline) that shows, live, the locks dlock knows of in --redis: name, kind
(mutex: a Mutex or FairMutex, which share the layout; rwlock: a read-write
lock), holders (host and process id), remaining TTL, last fencing token and
queued waiters; and its semaphores (size, the permits held by each permit's
weight, free permits, holders and waiters) and count-down latches (count
and TTL). With --metrics it also scrapes the application's Prometheus
endpoint (dlockprom's metrics) and shows grant, attempt and wait-timeout
rates and the mean wait. It prints the page's URL on stdout and runs until
interrupted (Ctrl-C).

The locks dlock knows of are the hashes whose fields look like lock owners
("<client id>:<n>", and "mode" for read-write locks: dlock's and Redisson's
layout) and the names with a fencing counter (dlock:fence:*, kept 24h after
the last grant); the semaphores are those with permits held
(dlock:semaphore:*), the latches those dlock armed (their marker
dlock:latch:*: a latch Redisson armed has none and is not shown). Held and
armed ones first, at most --max-locks entries in all.

Cost for Redis. The page polls the server every --interval, but the server
refreshes at most once per --interval however many browsers watch (they
share the cached result), and not at all while nobody does. One refresh, per
master node, is:
  SCAN ... TYPE hash COUNT 1000           one call per 1000 keys in the database
  HRANDFIELD key 5                        one per hash found, pipelined per SCAN page
  SCAN ... MATCH dlock:fence:* COUNT 1000 one call per 1000 keys in the database
  SCAN ... MATCH dlock:semaphore:* ...    one call per 1000 keys in the database
  SCAN ... MATCH dlock:latch:* ...        one call per 1000 keys in the database
and then, per entry shown (at most --max-locks), one MULTI in one round
trip: for a lock TYPE, HGETALL, PTTL, GET, LRANGE and ZCARD (8 commands),
for a semaphore TIME, ZRANGE, GET, LRANGE and PTTL (7), for a latch GET and
PTTL (4). So a database of N keys with H hashes, L locks, S semaphores and
C latches costs about 4*N/1000 + H + 8*L + 7*S + 4*C commands per refresh;
never KEYS. The page shows the count of the last refresh.

Read-only by default. With --allow-unlock each held lock gets a "Force
unlock" button that asks for confirmation and then POSTs to the server with
a per-process CSRF token; it does what "dlock unlock --force" does. The page
cannot be framed.

Hosts. The server answers only requests whose Host is an allowed host (421
otherwise, the page and its token included): on a loopback --listen, the
loopback names (localhost, 127.0.0.1, [::1]) on any port, plus each
--allow-host; on any other --listen, only the --allow-host names, and
without one the dashboard refuses to start. --allow-host HOST allows HOST on
any port, HOST:PORT on that port only; give the names the browser's address
bar shows (behind a reverse proxy, the proxy's). A force unlock must also
come with an Origin on the list (http or https), when the browser sends one.
This stops web pages, a DNS-rebound name's included, from reading the page
or unlocking through a visitor's browser. It is not authentication: anyone
who can reach the port can send an allowed Host, read every lock name and
holder, and with --allow-unlock force-unlock. Keep the dashboard on
loopback (reach it through an SSH tunnel), or put an authenticating proxy
in front of it.

Exit codes: 0 after Ctrl-C or SIGTERM, 2 bad flags, --listen address in
use, or a --listen beyond loopback without --allow-host, 69 Redis
unreachable at start, 77 Redis refused the first PING (a wrong password,
an ACL denial).`,
		Example: `  dlock dashboard
  dlock --redis redis://10.0.0.5:6379 dashboard --listen 127.0.0.1:9000
  dlock dashboard --metrics http://app-1:9464/metrics --interval 5s
  dlock dashboard --allow-unlock
  dlock dashboard --listen 0.0.0.0:8080 --allow-host dash.internal.example`,
		Args: wrapArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkDashboardFlags(&f); err != nil {
				return err
			}
			if a.namespace != "" {
				f.space, _ = keys.NewSpace(a.namespace) // checked before RunE
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// Listen first: where it listens decides whether it may start.
			ln, err := net.Listen("tcp", f.listen)
			if err != nil {
				return usagef("--listen %s: %v", f.listen, err)
			}
			defer ln.Close()
			f.hosts.loopback = isLoopback(ln.Addr())
			if !f.hosts.loopback && len(f.hosts.entries) == 0 {
				return usagef("--listen %s is beyond loopback: name the hosts a browser reaches the page by with --allow-host (repeatable), e.g. --allow-host dash.example.com; see dlock dashboard --help", ln.Addr())
			}
			rdb, t, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			c, err := dlock.New(rdb, a.clientOptions()...)
			if err != nil {
				return err
			}
			defer c.Close()
			d := newDashboard(rdb, c, t.where(), f)
			// A client that sends slowly, or keeps an idle connection, is cut off:
			// the server is reachable by whatever else runs on the machine.
			srv := &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			fmt.Fprintf(a.stdout, "dlock dashboard on %s (Redis %s%s); Ctrl-C stops it\n", f.hosts.pageURL(ln.Addr()), t.where(), map[bool]string{true: ", force unlock allowed", false: ", read-only"}[f.allowUnlock])
			if !f.hosts.loopback {
				can := "read every lock"
				if f.allowUnlock {
					can += " and force-unlock"
				}
				fmt.Fprintf(a.stderr, "dlock: warning: the dashboard listens on %s, beyond this machine, without authentication: anyone who can reach it can %s\n", ln.Addr(), can)
			}
			select {
			case <-ctx.Done():
			case err := <-served:
				return fmt.Errorf("dashboard: %w", err)
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			<-served
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve the page on (port 0: any free port)")
	fl.DurationVar(&f.interval, "interval", defaultInterval, "refresh period: the page polls and Redis is scanned at most this often")
	fl.IntVar(&f.maxLocks, "max-locks", defaultMaxLocks, "show at most this many locks, held ones first")
	fl.StringVar(&f.metricsURL, "metrics", "", "the application's Prometheus endpoint with dlockprom metrics, e.g. http://app:9464/metrics")
	fl.BoolVar(&f.allowUnlock, "allow-unlock", false, "offer a confirmed force unlock on the page")
	fl.StringArrayVar(&f.allowHosts, "allow-host", nil, "a HOST or HOST:PORT the page is reached by (repeatable); required when --listen is beyond loopback")
	return cmd
}

func checkDashboardFlags(f *dashboardFlags) error {
	switch {
	case f.interval < minInterval || f.interval > maxInterval:
		return usagef("--interval must be at least %v and at most %v, got %v", minInterval, maxInterval, f.interval)
	case f.maxLocks < 1 || f.maxLocks > maxMaxLocks:
		return usagef("--max-locks must be 1 to %d, got %d", maxMaxLocks, f.maxLocks)
	case f.listen == "":
		return usagef("--listen is empty (want host:port, e.g. 127.0.0.1:8080)")
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return usagef("--listen %q: want host:port, e.g. 127.0.0.1:8080", f.listen)
	}
	for i, h := range f.allowHosts {
		e, ok := parseAllowHost(h)
		if !ok {
			return usagef("--allow-host #%d: want HOST or HOST:PORT as a browser's address bar has it, e.g. dash.example.com or 10.0.0.5:8080", i+1)
		}
		f.hosts.entries = append(f.hosts.entries, e)
	}
	if f.metricsURL != "" {
		u, err := url.Parse(f.metricsURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("--metrics %s: want an http:// or https:// URL, e.g. http://app:9464/metrics", redactURL(f.metricsURL))
		}
	}
	return nil
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// snapshot is GET /api/locks's JSON.
type snapshot struct {
	Redis       string        `json:"redis"`
	At          time.Time     `json:"at"`
	IntervalMs  int64         `json:"interval_ms"`
	Seq         int64         `json:"refresh"` // counts the refreshes (scans) since start
	Locks       []listedState `json:"locks"`
	More        int           `json:"more"` // locks found but not shown (--max-locks)
	Cost        scanCost      `json:"cost"`
	Commands    int           `json:"commands"` // Redis commands of this refresh
	Error       string        `json:"error,omitempty"`
	Metrics     *rates        `json:"metrics,omitempty"`
	AllowUnlock bool          `json:"allow_unlock"`
}

// dashboard is the HTTP handler. Its refresh is cached for the interval:
// however many requests arrive, Redis is scanned at most once per interval.
type dashboard struct {
	rdb   redis.UniversalClient
	locks *dlock.Client
	where string
	f     dashboardFlags
	csrf  string
	mux   *http.ServeMux
	page  *template.Template

	mu      sync.Mutex // serializes refreshes; guards the fields below
	last    time.Time
	cached  []byte
	seq     int64
	scraper *scraper
}

func newDashboard(rdb redis.UniversalClient, c *dlock.Client, where string, f dashboardFlags) *dashboard {
	var b [32]byte
	_, _ = rand.Read(b[:])
	d := &dashboard{rdb: rdb, locks: c, where: where, f: f, csrf: hex.EncodeToString(b[:]), mux: http.NewServeMux()}
	if f.metricsURL != "" {
		d.scraper = newScraper(f.metricsURL)
	}
	d.page = template.Must(template.ParseFS(webFS, "web/index.html"))
	static, _ := fs.Sub(webFS, "web/static")
	d.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	d.mux.HandleFunc("GET /{$}", d.servePage)
	d.mux.HandleFunc("GET /api/locks", d.serveLocks)
	d.mux.HandleFunc("POST /api/unlock", d.serveUnlock)
	return d
}

// ServeHTTP checks the Host header against the allowed hosts (so that a
// DNS-rebound page cannot read the CSRF token) and sets the headers that
// keep the page from being framed or loading foreign code.
func (d *dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !d.f.hosts.allows(r.Host) {
		http.Error(w, "dlock dashboard: Host "+strconv.Quote(truncate(r.Host, 100))+" is not an allowed host (see --allow-host)", http.StatusMisdirectedRequest)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	d.mux.ServeHTTP(w, r)
}

func (d *dashboard) servePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = d.page.Execute(w, map[string]any{
		"Title":       dashboardHeading,
		"Redis":       d.where,
		"CSRF":        d.csrf,
		"IntervalMs":  d.f.interval.Milliseconds(),
		"AllowUnlock": d.f.allowUnlock,
		"Metrics":     redactURL(d.f.metricsURL),
	})
}

func (d *dashboard) serveLocks(w http.ResponseWriter, r *http.Request) {
	b := d.snapshot(r.Context())
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// snapshot returns the cached refresh, or refreshes when it is older than
// the interval. Concurrent callers wait for one refresh.
func (d *dashboard) snapshot(ctx context.Context) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cached != nil && time.Since(d.last) < d.f.interval {
		return d.cached
	}
	// A browser that goes away does not abort the shared refresh.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshTimeout)
	defer cancel()
	d.seq++
	s := snapshot{Redis: d.where, At: time.Now().UTC(), IntervalMs: d.f.interval.Milliseconds(), Seq: d.seq,
		Locks: []listedState{}, AllowUnlock: d.f.allowUnlock}
	f, err := discover(ctx, d.rdb, d.f.space, d.f.maxLocks)
	if err == nil {
		s.Locks, s.More, err = readLocks(ctx, d.rdb, d.locks, &f, d.f.maxLocks)
	}
	if err != nil {
		s.Error = "reading Redis: " + oneLine(err.Error())
	}
	s.Cost, s.Commands = f.cost, f.cost.Total()
	if d.scraper != nil {
		s.Metrics = d.scraper.rates(ctx)
	}
	b, err := json.Marshal(s)
	if err != nil { // cannot happen: plain types
		b = []byte(`{"error":` + strconv.Quote(err.Error()) + `}`)
	}
	d.cached, d.last = b, time.Now()
	return b
}

// invalidate makes the next request refresh.
func (d *dashboard) invalidate() {
	d.mu.Lock()
	d.cached = nil
	d.mu.Unlock()
}

// unlockRequest is POST /api/unlock's body.
type unlockRequest struct {
	Name string `json:"name"`
}

// serveUnlock force-unlocks a lock: only with --allow-unlock, the CSRF
// token in its header, a JSON body (which a cross-site form cannot send),
// an Origin on the allowed hosts when the browser sends one (compared with
// the list, not with the request's own Host, which a rebound name controls)
// and a same-origin Sec-Fetch-Site when it sends that.
func (d *dashboard) serveUnlock(w http.ResponseWriter, r *http.Request) {
	reply := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
	}
	if !d.f.allowUnlock {
		reply(http.StatusForbidden, "read-only dashboard: start it with --allow-unlock to unlock from the page")
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(d.csrf)) != 1 {
		reply(http.StatusForbidden, "missing or wrong CSRF token: reload the page")
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !d.f.hosts.allowsOrigin(o) {
		reply(http.StatusForbidden, "cross-origin request refused: the Origin is not an allowed host")
		return
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		reply(http.StatusForbidden, "cross-site request refused")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		reply(http.StatusUnsupportedMediaType, "want Content-Type application/json")
		return
	}
	var req unlockRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<10)).Decode(&req); err != nil {
		reply(http.StatusBadRequest, "bad JSON body")
		return
	}
	if err := checkName("name", req.Name); err != nil {
		reply(http.StatusBadRequest, oneLine(err.Error()))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), refreshTimeout)
	defer cancel()
	msg, err := forceUnlockMsg(ctx, d.locks, req.Name)
	d.invalidate()
	if err != nil {
		code := http.StatusBadGateway
		if errors.Is(err, dlock.ErrInvalidArgument) {
			code = http.StatusBadRequest
		}
		reply(code, oneLine(err.Error()))
		return
	}
	reply(http.StatusOK, msg)
}
