package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// promSample is the dlockprom counters of one scrape, summed per kind.
type promSample struct {
	at        time.Time
	acquired  map[string]float64 // dlock_acquired_total by kind
	attempts  float64            // dlock_acquire_attempts_total
	timeouts  float64            // dlock_wait_timeouts_total
	waitSum   float64            // dlock_wait_duration_seconds_sum
	waitCount float64            // dlock_wait_duration_seconds_count
	held      float64            // dlock_held (gauge)
	lost      float64            // dlock_lost_total
}

// rates is the metrics part of the dashboard's JSON: per-second rates over
// the last two scrapes of --metrics.
type rates struct {
	URL   string `json:"url"`
	Error string `json:"error,omitempty"`
	// Ready is false until two scrapes make a rate.
	Ready              bool               `json:"ready"`
	GrantsPerSec       float64            `json:"grants_per_sec"`
	GrantsPerSecByKind map[string]float64 `json:"grants_per_sec_by_kind"`
	AttemptsPerSec     float64            `json:"attempts_per_sec"`
	TimeoutsPerSec     float64            `json:"wait_timeouts_per_sec"`
	WaitAvgMs          float64            `json:"wait_avg_ms"` // mean wait of the acquisitions in the window
	Held               float64            `json:"held"`        // dlock_held now
	Lost               float64            `json:"lost_total"`
	WindowMs           float64            `json:"window_ms"`
}

// scraper reads an application's Prometheus endpoint and turns dlockprom's
// counters into rates. Not safe for concurrent use (the dashboard calls it
// under its refresh lock).
type scraper struct {
	url   string // with its credentials: only for requests
	shown string // redactURL(url): for everything shown
	hc    *http.Client
	prev  *promSample
}

func newScraper(url string) *scraper {
	return &scraper{url: url, shown: redactURL(url), hc: &http.Client{Timeout: 3 * time.Second}}
}

// metricName reports which dlockprom metric name is (with or without a
// dlockprom.WithNamespace prefix), or "".
func metricName(name string) string {
	for _, m := range []string{"dlock_acquired_total", "dlock_acquire_attempts_total", "dlock_wait_timeouts_total",
		"dlock_wait_duration_seconds", "dlock_held", "dlock_lost_total"} {
		if name == m || strings.HasSuffix(name, "_"+m) {
			return m
		}
	}
	return ""
}

// scrape fetches and parses one sample.
func (s *scraper) scrape(ctx context.Context) (*promSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := s.hc.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		// url.Error quotes the URL: name it redacted instead.
		return nil, fmt.Errorf("GET %s: %w", s.shown, ue.Err)
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.shown, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s is not Prometheus text format: %v", s.shown, err)
	}
	smp := &promSample{at: time.Now(), acquired: map[string]float64{}}
	found := false
	for name, fam := range fams {
		m := metricName(name)
		if m == "" {
			continue
		}
		found = true
		for _, x := range fam.GetMetric() {
			switch m {
			case "dlock_acquired_total":
				smp.acquired[label(x, "kind")] += x.GetCounter().GetValue()
			case "dlock_acquire_attempts_total":
				smp.attempts += x.GetCounter().GetValue()
			case "dlock_wait_timeouts_total":
				smp.timeouts += x.GetCounter().GetValue()
			case "dlock_wait_duration_seconds":
				smp.waitSum += x.GetHistogram().GetSampleSum()
				smp.waitCount += float64(x.GetHistogram().GetSampleCount())
			case "dlock_held":
				smp.held += x.GetGauge().GetValue()
			case "dlock_lost_total":
				smp.lost += x.GetCounter().GetValue()
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("%s has no dlock_* metrics (is dlockprom registered there?)", s.shown)
	}
	return smp, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// rates scrapes once and returns the rates since the previous scrape.
func (s *scraper) rates(ctx context.Context) *rates {
	r := &rates{URL: s.shown, GrantsPerSecByKind: map[string]float64{}}
	defer r.finite()
	cur, err := s.scrape(ctx)
	if err != nil {
		r.Error = oneLine(err.Error())
		return r
	}
	prev := s.prev
	s.prev = cur
	r.Held, r.Lost = cur.held, cur.lost
	if prev == nil {
		return r
	}
	dt := cur.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		return r
	}
	r.Ready = true
	r.WindowMs = math.Round(dt * 1000)
	// A counter that went down was reset (the application restarted): count
	// from zero.
	delta := func(now, before float64) float64 {
		if now < before {
			return now
		}
		return now - before
	}
	kinds := make([]string, 0, len(cur.acquired))
	for k := range cur.acquired {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		v := delta(cur.acquired[k], prev.acquired[k]) / dt
		r.GrantsPerSecByKind[k] = round2(v)
		r.GrantsPerSec += v
	}
	r.GrantsPerSec = round2(r.GrantsPerSec)
	r.AttemptsPerSec = round2(delta(cur.attempts, prev.attempts) / dt)
	r.TimeoutsPerSec = round2(delta(cur.timeouts, prev.timeouts) / dt)
	if n := delta(cur.waitCount, prev.waitCount); n > 0 {
		r.WaitAvgMs = round2(delta(cur.waitSum, prev.waitSum) / n * 1000)
	}
	return r
}

// finite zeroes what is NaN or infinite (an endpoint may say so: it is
// valid Prometheus text): JSON has no such numbers, and the page's
// snapshot, locks included, would fail to encode.
func (r *rates) finite() {
	for _, v := range []*float64{&r.GrantsPerSec, &r.AttemptsPerSec, &r.TimeoutsPerSec, &r.WaitAvgMs, &r.Held, &r.Lost, &r.WindowMs} {
		if math.IsNaN(*v) || math.IsInf(*v, 0) {
			*v = 0
		}
	}
	for k, v := range r.GrantsPerSecByKind {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			r.GrantsPerSecByKind[k] = 0
		}
	}
}
