package dlockprom_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockprom"
)

// dashboardFile is the Grafana dashboard shipped for dlockprom's metrics.
const dashboardFile = "grafana/dlock.json"

// labelValues matches a Grafana variable query and captures its selector.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// promQLKeywords are the PromQL words that are neither functions (those are
// followed by "(") nor metric names.
var promQLKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true, "stdvar": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "group": true,
	"inf": true, "nan": true,
}

// metricNames returns the metric names a PromQL expression selects: the
// identifiers outside label matchers {...}, ranges [...], strings, the
// label lists of by/without/on/ignoring/group_*, and not followed by "(".
func metricNames(expr string) ([]string, error) {
	var names []string
	rs := []rune(expr)
	isIdent := func(r rune, first bool) bool {
		return r == '_' || r == ':' || unicode.IsLetter(r) || (!first && unicode.IsDigit(r))
	}
	skipSpace := func(i int) int {
		for i < len(rs) && unicode.IsSpace(rs[i]) {
			i++
		}
		return i
	}
	// skip returns the index after the bracket that closes rs[i].
	skip := func(i int, open, close rune) (int, error) {
		depth := 0
		for ; i < len(rs); i++ {
			switch rs[i] {
			case '"', '\'', '`':
				q := rs[i]
				for i++; i < len(rs) && rs[i] != q; i++ {
					if rs[i] == '\\' {
						i++
					}
				}
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, errors.New("unbalanced " + string(open) + " in " + expr)
	}
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case r == '{':
			j, err := skip(i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = j
		case r == '[':
			j, err := skip(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case r == '"' || r == '\'' || r == '`':
			j := i + 1
			for j < len(rs) && rs[j] != r {
				if rs[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case unicode.IsDigit(r) || r == '.':
			for i < len(rs) && (unicode.IsDigit(rs[i]) || rs[i] == '.' || rs[i] == 'e') {
				i++
			}
		case r == '$': // a Grafana variable ($__range, ${job})
			i++
			for i < len(rs) && (isIdent(rs[i], false) || rs[i] == '{' || rs[i] == '}') {
				i++
			}
		case isIdent(r, true):
			j := i
			for j < len(rs) && isIdent(rs[j], false) {
				j++
			}
			word := string(rs[i:j])
			next := skipSpace(j)
			switch {
			case word == "by" || word == "without" || word == "on" || word == "ignoring" || word == "group_left" || word == "group_right":
				if next < len(rs) && rs[next] == '(' {
					k, err := skip(next, '(', ')')
					if err != nil {
						return nil, err
					}
					j = k
				}
			case word == "offset": // and its duration, as in "offset 5m"
				j = next
				for j < len(rs) && (isIdent(rs[j], false) || rs[j] == '-') {
					j++
				}
			case next < len(rs) && rs[next] == '(':
				// a function or an aggregation
			case promQLKeywords[strings.ToLower(word)]:
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names, nil
}

func TestMetricNamesParser(t *testing.T) {
	got, err := metricNames(`histogram_quantile(0.99, sum by (le, kind) (rate(a_bucket{job=~"$job", x="}"}[$__rate_interval]))) / on(kind) group_left(le) b offset 5m + sum(c{kind="a"})`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a_bucket,b,c" {
		t.Fatalf("got %v", got)
	}
}

// exercisedMetrics registers dlockprom on a fresh registry, reports every
// kind of event for every lock kind, and returns the names Gather yields,
// histograms with their _bucket, _sum and _count series.
func exercisedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []dlock.Kind{dlock.KindMutex, dlock.KindFair, dlock.KindRead, dlock.KindWrite, dlock.KindMulti} {
		m.AcquireStarted(ctx, k, "x")(dlock.Acquisition{Kind: k, Name: "x", Acquired: true, Waited: time.Millisecond})
		m.AcquireStarted(ctx, k, "x")(dlock.Acquisition{Kind: k, Name: "x", TimedOut: true, Waited: time.Second})
		m.AcquireStarted(ctx, k, "x")(dlock.Acquisition{Kind: k, Name: "x", Err: errors.New("down"), Waited: time.Millisecond})
		m.ReleaseStarted(ctx, k, "x")(dlock.Release{Kind: k, Name: "x", Final: true, Held: time.Second})
		m.AcquireStarted(ctx, k, "x")(dlock.Acquisition{Kind: k, Name: "x", Acquired: true})
		m.Lost(k, "x", dlock.ErrLockLost)
	}
	m.Renewed(3, nil)
	m.Renewed(1, errors.New("timeout"))
	m.AcquireStarted(ctx, dlock.KindMutex, "x")(dlock.Acquisition{Kind: dlock.KindMutex, Name: "x", Acquired: true, Backend: "mysql"})
	m.FellBack(dlock.KindMutex, "x", "mysql", dlock.ErrUnavailable)
	m.BreakerChanged("open")
	m.AcquireStarted(ctx, dlock.KindSemaphore, "x")(dlock.Acquisition{Kind: dlock.KindSemaphore, Name: "x", Acquired: true, Weight: 3})
	m.CountedDown("x", nil)
	m.CountedDown("x", errors.New("down"))
	m.LatchWaited("x", time.Millisecond, nil)
	m.LatchWaited("x", time.Millisecond, errors.New("down"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		if mf.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				have[n+s] = true
			}
			continue
		}
		have[n] = true
	}
	return have
}

// Every metric the Grafana dashboard queries exists in dlockprom, and every
// dlockprom metric is on the dashboard.
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardFile, err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if s, ok := c.(string); ok && (k == "expr" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(doc)
	if len(exprs) < 10 {
		t.Fatalf("only %d queries found in %s", len(exprs), dashboardFile)
	}
	have := exercisedMetrics(t)
	used := map[string]bool{}
	for _, e := range exprs {
		// A variable's label_values(metric{...}, label) names a metric too.
		if m := labelValues.FindStringSubmatch(e); m != nil {
			e = m[1]
		}
		names, err := metricNames(e)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			t.Errorf("query %q selects no metric", e)
		}
		for _, n := range names {
			used[n] = true
			if !have[n] {
				t.Errorf("the dashboard queries %s, which dlockprom does not export (query %q)", n, e)
			}
		}
	}
	var missing []string
	for n := range have {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if !used[n] && !used[base+"_bucket"] && !used[base+"_sum"] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("dlockprom metrics not on the dashboard: %v", missing)
	}
	// Each panel has an id, a title and a target; ids are unique.
	var d struct {
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if p.ID == 0 || ids[p.ID] || p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("panel %+v", p)
		}
		ids[p.ID] = true
	}
}
