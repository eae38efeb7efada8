package deploy_test

// Tests of deploy/monitoring: the Prometheus alert rules, read by Prometheus's own rule parser, and the
// Grafana dashboard. Every series they query must be one the bridge exports.

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

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
// daemon does, with every observer exercised so that the labelled series exist. Histograms add their
// _bucket, _sum and _count series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, metrics.BuildInfo{Version: "v", Commit: "c", GoVersion: runtime.Version()})
	m.SetSources(metrics.Sources{
		StreamState:    func() upstream.StreamState { return upstream.StateConnected },
		ReportsPending: func() uint64 { return 0 },
		NATSConnected:  func() bool { return true },
		NATSReconnects: func() uint64 { return 0 },
		Readiness:      func() map[string]bool { return map[string]bool{"nats": true} },
		Leader:         func() bool { return true },
	})
	m.Publish.Published("GATE_IN")
	m.Stream.Received(&event.Event{ID: "x"})
	m.Publish.AckLatency(0)
	rt := m.Upstream.InstrumentTransport(okTransport{}, func(*http.Request) string { return "token" })
	req, _ := http.NewRequest(http.MethodGet, "http://example.invalid/", nil)
	if resp, err := rt.RoundTrip(req); err == nil {
		resp.Body.Close()
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	return names
}
