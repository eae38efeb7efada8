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
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
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
// report consumer's backlog, the units view's shared consumer's lag): summed over the replicas they count
// it once per replica.
var sharedGauges = []string{"bridge_reports_pending", "bridge_units_lag_events", "bridge_units_lag_seconds"}

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

// exportedMetrics returns the name of every series the bridge exports, read back from a running bridge's
// /metrics by Prometheus's parser. Histograms add their _bucket, _sum and _count series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for name, mf := range parseExposition(t, exposition(t).text) {
		names[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
	return names
}

// page is a running bridge's /metrics, as the text format and as OpenMetrics.
type page struct {
	text        []byte
	om          []byte
	contentType string // of om
}

var (
	scrapeOnce sync.Once
	scraped    page
	scrapeErr  error
)

// exposition returns the /metrics page of a whole bridge (an embedded NATS server, the simulator, the
// daemon) once it stored an event, so that the labelled series exist. The bridge runs once per test
// binary.
func exposition(t *testing.T) page {
	t.Helper()
	scrapeOnce.Do(func() { scraped, scrapeErr = scrapeBridge() })
	if scrapeErr != nil {
		t.Fatal(scrapeErr)
	}
	return scraped
}

// prometheusAccept is the Accept header of a Prometheus server's scrapes (3.x, default settings).
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6," +
	"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4," +
	"text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

func scrapeBridge() (page, error) {
	b, err := bridgetest.Launch(bridgetest.Options{})
	if err != nil {
		return page{}, err
	}
	defer b.Stop()
	b.Sim().Inject(bridgetest.User, "ev-1", "GATE_IN",
		[]byte(`{"id":"ev-1","type":"GATE_IN","timestamp":"2026-01-02T03:04:05Z"}`))
	get := func(accept string) ([]byte, string, error) {
		req, err := http.NewRequest(http.MethodGet, "http://"+b.HTTPAddr()+"/metrics", nil)
		if err != nil {
			return nil, "", err
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return body, resp.Header.Get("Content-Type"), err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		body, ct, err := get("")
		if err != nil {
			return page{}, err
		}
		if expfmt.ResponseFormat(http.Header{"Content-Type": {ct}}).FormatType() != expfmt.TypeTextPlain {
			return page{}, fmt.Errorf("a plain GET /metrics: Content-Type %q is not the text format's", ct)
		}
		if bytes.Contains(body, []byte(`bridge_events_published_total{type="GATE_IN"} 1`)) {
			om, omType, err := get(prometheusAccept)
			return page{text: body, om: om, contentType: omType}, err
		}
		if time.Now().After(deadline) {
			return page{}, fmt.Errorf("the bridge did not count its event within 30 s:\n%s", body)
		}
	}
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

// TestMetricsExposition: Prometheus's parser reads a running bridge's /metrics in the text format, and
// promlint finds nothing to say of it; it holds the Go runtime's and the process's families besides the
// bridge's. Asked as Prometheus asks, the bridge answers in OpenMetrics (which carries exemplars), and
// Prometheus's OpenMetrics parser reads that page to its end.
func TestMetricsExposition(t *testing.T) {
	p := exposition(t)
	families := parseExposition(t, p.text)
	problems, err := promlint.New(bytes.NewReader(p.text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for _, name := range []string{"bridge_build_info", "bridge_publish_ack_seconds", "go_goroutines",
		"process_resident_memory_bytes"} {
		if families[name] == nil {
			t.Errorf("%s is not exported", name)
		}
	}

	if !strings.HasPrefix(p.contentType, "application/openmetrics-text; version=1.0.0") {
		t.Fatalf("Prometheus's scrape: Content-Type %q, want OpenMetrics 1.0.0", p.contentType)
	}
	parser, err := textparse.New(p.om, p.contentType, nil, textparse.ParserOptions{})
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	for {
		entry, err := parser.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Prometheus's OpenMetrics parser refuses the page after %d series: %v\n%s", series, err, p.om)
		}
		if entry == textparse.EntrySeries {
			series++
		}
	}
	if series < 100 {
		t.Errorf("the OpenMetrics page holds %d series:\n%s", series, p.om)
	}
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
