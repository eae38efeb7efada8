package deploy_test

// Tests of deploy/monitoring: the Prometheus alert rules, read by Prometheus's own rule parser and
// evaluated by its query engine over made-up series, and the Grafana dashboard. Every series they query
// must be one the bridge exports.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/tracking-bridge/tracking-bridge/internal/event"
	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

const (
	rulesFile     = "deploy/monitoring/prometheus-rules.yml"
	dashboardFile = "deploy/monitoring/grafana-dashboard.json"
)

// runbookURL is where every alert's runbook_url points: an entry of docs/operations.md.
const runbookURL = "https://github.com/tracking-bridge/tracking-bridge/blob/main/docs/operations.md#"

// TestPrometheusRules checks the alert rules with Prometheus's own parser and validator (YAML shape,
// PromQL, templates), then what an operator relies on: every alert has a for:, a severity, a summary and
// a runbook entry that exists, and queries only series the bridge (or Prometheus) exports.
func TestPrometheusRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile(repoPath(rulesFile), false,
		model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if groups == nil {
		t.FailNow()
	}
	anchors := runbookAnchors(t)
	names := exportedMetrics(t)
	names["up"] = true // Prometheus's own, per scrape target
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule (%s); the file holds alerts only", g.Name, r.Record)
				continue
			}
			alerts++
			if r.For <= 0 {
				t.Errorf("%s: no for: (a single bad scrape would page)", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary", r.Alert)
			}
			url := r.Annotations["runbook_url"]
			if anchor, ok := strings.CutPrefix(url, runbookURL); !ok || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q is not a heading of docs/operations.md", r.Alert, url)
			}
			if want := strings.ToLower(r.Alert); !strings.HasSuffix(url, "#"+want) {
				t.Errorf("%s: runbook_url %q does not point to the alert's own entry (#%s)", r.Alert, url, want)
			}
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			for _, m := range summedShared(expr) {
				t.Errorf("%s sums %s over the replicas, which each report the same shared count; use max", r.Alert, m)
			}
			for _, vs := range parser.ExtractSelectors(expr) {
				for _, m := range vs {
					if m.Name == model.MetricNameLabel && !names[m.Value] {
						t.Errorf("%s queries %s, which the bridge does not export", r.Alert, m.Value)
					}
				}
			}
		}
	}
	if alerts < 10 {
		t.Errorf("%d alerts, want the runbook's set (at least 10)", alerts)
	}
}

// TestGrafanaDashboard: every metric the dashboard queries is one the bridge's registry has (histograms
// through their _bucket, _sum and _count series), and it has the panels the operators need.
func TestGrafanaDashboard(t *testing.T) {
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readRepo(t, dashboardFile)), &dash); err != nil {
		t.Fatalf("%s: not JSON: %v", dashboardFile, err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Error("dashboard without title or uid")
	}

	names := exportedMetrics(t)
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$instance", ".*")
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(tg.Expr))
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			for _, m := range summedShared(expr) {
				t.Errorf("panel %q sums %s over the replicas, which each report the same shared count; use max", p.Title, m)
			}
		}
	}
	ident := regexp.MustCompile(`\b(bridge_[a-z0-9_]+|go_[a-z0-9_]+|process_[a-z0-9_]+)\b`)
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, id := range ident.FindAllString(tg.Expr, -1) {
				queried[id] = true
				if !names[id] {
					t.Errorf("panel %q queries %s, which the bridge does not export", p.Title, id)
				}
			}
		}
	}
	for _, want := range []string{"bridge_events_published_total", "bridge_stream_state",
		"bridge_stream_last_event_age_seconds", "bridge_reports_outcomes_total", "bridge_token_requests_total"} {
		if !queried[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}

// sharedGauges are the gauges every replica reports alike, for state the replicas share (the durable
// report consumer's backlog): summed over the replicas they count it once per replica.
var sharedGauges = []string{"bridge_reports_pending"}

// summedShared returns the sharedGauges that expr sums.
func summedShared(expr parser.Expr) []string {
	var found []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		agg, ok := node.(*parser.AggregateExpr)
		if !ok || agg.Op != parser.SUM {
			return nil
		}
		for _, vs := range parser.ExtractSelectors(agg.Expr) {
			for _, m := range vs {
				if m.Name == model.MetricNameLabel && slices.Contains(sharedGauges, m.Value) {
					found = append(found, m.Value)
				}
			}
		}
		return nil
	})
	return found
}

// TestGrafanaInstanceVariable: the dashboard's "All" instances are the bridge's own targets. A custom
// allValue such as ".*" would make the process and Go panels (process_*, go_*) plot every target that
// Prometheus scrapes; without one, Grafana expands "All" to the variable's values, which its query takes
// from bridge_build_info.
func TestGrafanaInstanceVariable(t *testing.T) {
	var dash struct {
		Templating struct {
			List []struct {
				Name     string `json:"name"`
				Query    any    `json:"query"`
				AllValue string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(readRepo(t, dashboardFile)), &dash); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range dash.Templating.List {
		if v.Name != "instance" {
			continue
		}
		found = true
		if v.AllValue != "" {
			t.Errorf("instance variable: allValue %q selects more than the bridge's targets", v.AllValue)
		}
		q, _ := json.Marshal(v.Query)
		if !strings.Contains(string(q), "bridge_build_info") {
			t.Errorf("instance variable: query %s does not select the bridge's targets", q)
		}
	}
	if !found {
		t.Error("no instance variable")
	}
}

// runbookAnchors returns the GitHub anchors of docs/operations.md's headings.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	heading := regexp.MustCompile(`(?m)^#{2,4} (.+)$`)
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	anchors := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(readRepo(t, "docs/operations.md"), -1) {
		a := drop.ReplaceAllString(strings.ToLower(m[1]), "")
		anchors[strings.ReplaceAll(a, " ", "-")] = true
	}
	return anchors
}

// okTransport answers every request 200.
type okTransport struct{}

func (okTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}, nil
}

// exportedMetrics returns the name of every series the bridge exports: everything registered as the
// daemon does, with every observer exercised so that the labelled series exist, read back from its
// /metrics text by Prometheus's parser. Histograms add their _bucket, _sum and _count series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for name, mf := range parseExposition(t, exposition(t)) {
		names[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
	return names
}

// exposition returns the bridge's /metrics text: its registry built as the daemon builds it, with every
// observer exercised so that the labelled series exist.
func exposition(t *testing.T) []byte {
	t.Helper()
	reg := metrics.NewRegistry()
	metrics.RegisterRuntime(reg)
	m := metrics.New(reg, metrics.BuildInfo{Version: "v", Commit: "c", GoVersion: runtime.Version()})
	m.SetSources(metrics.Sources{
		StreamState:    func() upstream.StreamState { return upstream.StateConnected },
		ReportsPending: func() uint64 { return 0 },
		NATSConnected:  func() bool { return true },
		NATSReconnects: func() uint64 { return 0 },
		Readiness:      func() map[string]bool { return map[string]bool{"nats": true, "upstream_stream": false} },
		Leader:         func() bool { return true },
	})
	m.Publish.Published("GATE_IN")
	m.Stream.Received(&event.Event{ID: "x"})
	m.Publish.AckLatency(3 * time.Millisecond)
	m.API.APIRefused("reply_not_inbox")
	rt := m.Upstream.InstrumentTransport(okTransport{}, func(*http.Request) string { return "token" })
	req, _ := http.NewRequest(http.MethodGet, "http://example.invalid/", nil)
	if resp, err := rt.RoundTrip(req); err == nil {
		resp.Body.Close()
	}
	runtime.GC() // go_gc_duration_seconds has a pause to show

	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" ||
		expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeTextPlain {
		t.Fatalf("Content-Type %q is not the text format's", ct)
	}
	return body
}

// parseExposition reads an exposition with Prometheus's own text parser, which refuses any line out of
// the format.
func parseExposition(t *testing.T, text []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses the exposition: %v\n%s", err, text)
	}
	return mfs
}

// TestMetricsExposition: the bridge writes /metrics itself (internal/metrics, to keep the Prometheus
// client library out of the daemon). Prometheus's parser reads it, promlint finds nothing, every family
// has its help, histograms are cumulative, and the Go runtime's and the process's families have the
// names, types and help texts of the client library's collectors, which dashboards expect.
func TestMetricsExposition(t *testing.T) {
	text := exposition(t)
	ours := parseExposition(t, text)

	problems, err := promlint.New(bytes.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for name, mf := range ours {
		if mf.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			prev := uint64(0)
			for _, b := range h.GetBucket() {
				if b.GetCumulativeCount() < prev {
					t.Errorf("%s: bucket le=%v holds %d, below the one before (%d)", name, b.GetUpperBound(), b.GetCumulativeCount(), prev)
				}
				prev = b.GetCumulativeCount()
			}
			if prev != h.GetSampleCount() {
				t.Errorf("%s: last bucket %d, count %d", name, prev, h.GetSampleCount())
			}
		}
	}
	got := func(name string) float64 {
		for _, m := range ours[name].GetMetric() {
			return m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
		t.Errorf("%s is not exported", name)
		return 0
	}
	if got("bridge_publish_ack_seconds") != 1 || got("bridge_events_received_total") != 1 || got("process_resident_memory_bytes") < 1<<20 {
		t.Errorf("values not as observed:\n%s", text)
	}
	if start := got("process_start_time_seconds"); math.Abs(start-float64(time.Now().Unix())) > 3600 {
		t.Errorf("process_start_time_seconds = %v, not within the hour", start)
	}

	// The client library's collectors, as the bridge registered them before it wrote /metrics itself.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	theirs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range theirs {
		o, ok := ours[mf.GetName()]
		if !ok {
			t.Errorf("%s (the client library's) is not exported", mf.GetName())
			continue
		}
		if o.GetType() != mf.GetType() || o.GetHelp() != mf.GetHelp() {
			t.Errorf("%s: %v %q, the client library's %v %q", mf.GetName(), o.GetType(), o.GetHelp(), mf.GetType(), mf.GetHelp())
		}
		var ol, tl []string
		for _, m := range o.GetMetric() {
			ol = append(ol, labelNames(m))
		}
		for _, m := range mf.GetMetric() {
			tl = append(tl, labelNames(m))
		}
		if !slices.Equal(ol, tl) {
			t.Errorf("%s: series with labels %q, the client library's %q", mf.GetName(), ol, tl)
		}
	}
	for name := range ours {
		if !strings.HasPrefix(name, "bridge_") && !slices.ContainsFunc(theirs, func(mf *dto.MetricFamily) bool { return mf.GetName() == name }) {
			t.Errorf("%s is neither the bridge's nor the client library's", name)
		}
	}
}

// TestRuntimeValuesAsClientLibrary: the go_* and process_* values are the client library's. Its
// collectors are read between two readings of the bridge's, back to back: each value must lie between
// the bridge's two (with a small slack for what moves in between: allocations, CPU ticks, traffic of
// other processes in the network namespace), and the settings (limits, GOGC, GOMAXPROCS, start time)
// must be equal. A collection or the scavenger between the readings can move a gauge: the comparison is
// tried again then, up to five times.
func TestRuntimeValuesAsClientLibrary(t *testing.T) {
	ours := metrics.NewRegistry()
	metrics.RegisterRuntime(ours)
	theirs := prometheus.NewRegistry()
	theirs.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	read := func() map[string]float64 {
		v := map[string]float64{}
		for _, f := range ours.Gather() {
			for _, s := range f.Samples {
				if len(s.Labels) == 0 {
					v[s.Name] = s.Value
				}
			}
		}
		return v
	}
	slack := map[string]float64{
		"process_cpu_seconds_total":            0.02,
		"process_network_receive_bytes_total":  1 << 20,
		"process_network_transmit_bytes_total": 1 << 20,
		"process_resident_memory_bytes":        1 << 20,
		"process_virtual_memory_bytes":         8 << 20,
		"go_threads":                           1,
		"go_goroutines":                        8, // the client library gathers in goroutines of its own
		"process_open_fds":                     1,
	}
	exact := []string{"process_start_time_seconds", "process_max_fds", "process_virtual_memory_max_bytes",
		"go_gc_gogc_percent", "go_gc_gomemlimit_bytes", "go_sched_gomaxprocs_threads"}
	var problems []string
	for range 5 {
		runtime.GC()
		before := read()
		mfs, err := theirs.Gather()
		if err != nil {
			t.Fatal(err)
		}
		after := read()
		problems = nil
		compared := 0
		for _, mf := range mfs {
			name := mf.GetName()
			if mf.GetType() == dto.MetricType_SUMMARY || len(mf.GetMetric()) != 1 || len(mf.GetMetric()[0].GetLabel()) > 0 {
				continue
			}
			m := mf.GetMetric()[0]
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			lo, hi := min(before[name], after[name]), max(before[name], after[name])
			d := slack[name]
			if d == 0 && strings.HasPrefix(name, "go_memstats_") && strings.HasSuffix(name, "_bytes") {
				d = 64 << 10
			}
			if d == 0 && strings.HasPrefix(name, "go_memstats_") {
				d = 256 // objects
			}
			if slices.Contains(exact, name) {
				lo, hi, d = before[name], before[name], 0.01
			}
			compared++
			if v < lo-d || v > hi+d {
				problems = append(problems, fmt.Sprintf("%s: the client library's %v, the bridge's %v then %v", name, v, before[name], after[name]))
			}
		}
		if compared < 30 {
			t.Fatalf("compared only %d values", compared)
		}
		if len(problems) == 0 {
			return
		}
	}
	t.Errorf("in five tries, the last:\n%s", strings.Join(problems, "\n"))
}

func labelNames(m *dto.Metric) string {
	var n []string
	for _, l := range m.GetLabel() {
		n = append(n, l.GetName())
	}
	return strings.Join(n, ",")
}

// sample is one float sample of a made-up series.
type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sample) Copy() chunks.Sample           { return s }

// seriesSet iterates over made-up series.
type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i <= len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.i-1] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// scrapes is a storage of made-up series, each scraped every 30 s with the same value from time 0 to
// the evaluation's end: series by labels in Prometheus's text form ({__name__="up", job="x"}).
func scrapes(t *testing.T, series map[string]float64, end time.Duration) storage.Queryable {
	t.Helper()
	var all []storage.Series
	for text, v := range series {
		lset, err := parser.NewParser(parser.Options{}).ParseMetric(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		var samples []chunks.Sample
		for ts := time.Duration(0); ts <= end; ts += 30 * time.Second {
			samples = append(samples, sample{t: ts.Milliseconds(), f: v})
		}
		all = append(all, storage.NewListSeries(lset, samples))
	}
	slices.SortFunc(all, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	return storage.QueryableFunc(func(int64, int64) (storage.Querier, error) {
		return &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var sel []storage.Series
			for _, s := range all {
				if slices.IndexFunc(ms, func(m *labels.Matcher) bool { return !m.Matches(s.Labels().Get(m.Name)) }) < 0 {
					sel = append(sel, s)
				}
			}
			return &seriesSet{series: sel}
		}}, nil
	})
}

// ruleAlerts evaluates alert name of the rules file with Prometheus's engine every 30 s from time 0 to
// end over the made-up series, and returns the label sets (the expression's) that have held for the
// alert's for: at the end, each as text.
func ruleAlerts(t *testing.T, name string, series map[string]float64, end time.Duration) []string {
	t.Helper()
	groups, errs := rulefmt.ParseFile(repoPath(rulesFile), false,
		model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	var rule *rulefmt.Rule
	for _, g := range groups.Groups {
		for i, r := range g.Rules {
			if r.Alert == name {
				rule = &g.Rules[i]
			}
		}
	}
	if rule == nil {
		t.Fatalf("%s: no alert %s", rulesFile, name)
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 100000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
		Parser: parser.NewParser(parser.Options{})})
	store := scrapes(t, series, end)
	activeAt := map[string]time.Duration{} // when each label set began to hold, as Prometheus's pending alerts
	for ts := time.Duration(0); ts <= end; ts += 30 * time.Second {
		q, err := engine.NewInstantQuery(t.Context(), store, nil, rule.Expr, time.Unix(0, 0).Add(ts))
		if err != nil {
			t.Fatal(err)
		}
		res := q.Exec(t.Context())
		vec, err := res.Vector()
		if err != nil {
			t.Fatalf("%s at %v: %v", name, ts, err)
		}
		now := map[string]time.Duration{}
		for _, s := range vec {
			key := s.Metric.DropMetricName().String()
			now[key] = ts
			if at, ok := activeAt[key]; ok {
				now[key] = at
			}
		}
		activeAt = now
		q.Close()
	}
	var firing []string
	for key, at := range activeAt {
		if end-at >= time.Duration(rule.For) {
			firing = append(firing, key)
		}
	}
	slices.Sort(firing)
	return firing
}

// TestPrometheusRulesPerInstall evaluates the alerts over all replicas: they count per install (job,
// namespace, service), so that two installs scraped by one Prometheus neither add up nor hide each
// other, and one fires when nothing at all is scraped.
func TestPrometheusRulesPerInstall(t *testing.T) {
	// Two installs, in namespaces a and b, of two scraped replicas each; values gives each pod's metric.
	installs := func(metric string, values ...float64) map[string]float64 {
		series := map[string]float64{}
		for i, v := range values {
			target := fmt.Sprintf(`job="tracking-bridge", namespace=%q, service="tracking-bridge", instance="10.0.%d.%d:8080"`,
				[]string{"a", "b"}[i/2], i/2, i%2)
			series[metric+"{"+target+"}"] = v
			series["up{"+target+"}"] = 1
		}
		return series
	}
	installA := []string{`{job="tracking-bridge", namespace="a", service="tracking-bridge"}`}
	for _, c := range []struct {
		name, alert string
		series      map[string]float64
		want        []string
	}{
		{"one leader in each of two installs", "TrackingBridgeSeveralLeaders", installs("bridge_leader", 1, 0, 1, 0), nil},
		{"one leader in each of two installs", "TrackingBridgeNoLeader", installs("bridge_leader", 1, 0, 0, 1), nil},
		{"two leaders in one install", "TrackingBridgeSeveralLeaders", installs("bridge_leader", 1, 1, 0, 1), installA},
		{"no leader in one install", "TrackingBridgeNoLeader", installs("bridge_leader", 0, 0, 0, 1), installA},
		{"the backlog of each install below the threshold", "TrackingBridgeReportsBacklog",
			installs("bridge_reports_pending", 800, 800, 900, 900), nil},
		{"one install's backlog above the threshold", "TrackingBridgeReportsBacklog",
			installs("bridge_reports_pending", 1500, 1500, 900, 900), installA},
		{"something scraped", "TrackingBridgeAbsent", installs("bridge_leader", 1, 0, 1, 0), nil},
		{"nothing scraped", "TrackingBridgeAbsent", map[string]float64{`up{job="other"}`: 1}, []string{`{job="tracking-bridge"}`}},
	} {
		t.Run(c.alert+"/"+c.name, func(t *testing.T) {
			if d := cmp.Diff(c.want, ruleAlerts(t, c.alert, c.series, 30*time.Minute)); d != "" {
				t.Errorf("firing (-want +got):\n%s", d)
			}
		})
	}
}
