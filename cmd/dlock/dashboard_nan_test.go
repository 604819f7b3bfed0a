package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// An application endpoint that reports a dlock metric as NaN or +Inf
// (valid Prometheus text) must not cost the page its locks: JSON has no
// NaN, and a snapshot that failed to encode carried no locks at all.
func TestDashboardNonFiniteMetrics(t *testing.T) {
	r := testenv.StartRedis(t)
	c := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := c.Mutex("t-nan")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Unlock(context.Background()) }()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("# TYPE dlock_held gauge\ndlock_held NaN\n# TYPE dlock_lost_total counter\ndlock_lost_total +Inf\n"))
	})}
	ln := listenLoopback(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, base := dashboardStart(t, r, "--metrics", "http://"+ln.Addr().String()+"/metrics")
	s := snapshotOf(t, base)
	if s.Error != "" || len(s.Locks) != 1 || s.Locks[0].Name != "t-nan" {
		t.Fatalf("snapshot: error %q, locks %+v", s.Error, s.Locks)
	}
}
