package daemon

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// TestMetricsPage: a running bridge's /metrics is served in OpenMetrics to a scraper that asks for it (so
// that exemplars can be), and in the text format otherwise; its bridge_* families are those
// docs/operations.md's metrics reference lists, no more and no fewer.
func TestMetricsPage(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	up.Sim().Inject("demo", "ev-1", "GATE_IN", []byte(`{"id":"ev-1","type":"GATE_IN","timestamp":"2026-01-02T03:04:05Z"}`))
	ob := opsStartBridge(t, up.Config(ns.URL()))
	// A labelled series is there once used: the event type's once the event is stored.
	testutil.Eventually(t, 15*time.Second, "the event counted", func() bool {
		return ob.counter(t, "bridge_events_published_total", map[string]string{"type": "GATE_IN"}) == 1
	})

	get := func(accept string) (string, string) {
		return testutil.Scrape(t, "http://"+ob.addr+"/metrics", accept)
	}
	ct, body := get("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	if !strings.HasPrefix(ct, "application/openmetrics-text; version=1.0.0") || !strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("asked for OpenMetrics: Content-Type %q, page ending %q", ct, body[max(0, len(body)-40):])
	}
	ct, body = get("text/plain")
	if !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("asked for text: Content-Type %q", ct)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses the page: %v\n%s", err, body)
	}

	documented := metricsReference(t)
	for name := range families {
		if strings.HasPrefix(name, metrics.Namespace+"_") && !documented[name] {
			t.Errorf("%s is not in the metrics reference of docs/operations.md", name)
		}
	}
	for name := range documented {
		if families[name] == nil {
			t.Errorf("docs/operations.md documents %s, which the bridge does not export", name)
		}
	}
}

// metricsReference returns the metrics named in the table of docs/operations.md's "Metrics reference".
func metricsReference(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, ref, ok := strings.Cut(string(raw), "## Metrics reference")
	if !ok {
		t.Fatal("docs/operations.md has no metrics reference")
	}
	ref, _, _ = strings.Cut(ref, "\n## ")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(bridge_[a-z_]+)`").FindAllStringSubmatch(ref, -1) {
		documented[m[1]] = true
	}
	if len(documented) < 20 {
		t.Fatalf("the metrics reference names %d metrics", len(documented))
	}
	return documented
}

// BenchmarkPerEvent: what every event costs in metrics, as the daemon wires them: the stream's read and
// event (upstream.StreamMetrics), the publisher's stored event and its acknowledgement's latency
// (publish.Metrics), over a few types.
func BenchmarkPerEvent(b *testing.B) {
	m := newPartMetrics(metrics.NewRegistry())
	ev := &upstream.Event{ID: "ev-1", Data: []byte(`{}`)}
	types := []string{"GATE_IN", "GATE_OUT", "ARRIVED", "DEPARTED", "HANDLING_STARTED", "HANDLING_FINISHED"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.stream.Heartbeat()
		m.stream.Received(ev)
		m.publish.Published(types[i%len(types)])
		m.publish.AckLatency(time.Millisecond, trace.TraceID{})
	}
}
