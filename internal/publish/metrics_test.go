package publish

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	return NewMetrics(reg), reg
}

// TestTypeCardinalityIsCapped: bridge_events_published_total has at most MaxTypes types and OtherType;
// events of the types beyond count under OtherType.
func TestTypeCardinalityIsCapped(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t)
	for i := range MaxTypes + 50 {
		m.Published(fmt.Sprintf("TYPE_%d", i))
		m.Published(fmt.Sprintf("TYPE_%d", i))
	}
	if got := testutil.Metric(t, reg, "bridge_events_published_total", map[string]string{"type": OtherType}); got != 100 {
		t.Errorf("other = %v, want 100 (50 types beyond the cap, twice each)", got)
	}
	if got := testutil.Metric(t, reg, "bridge_events_published_total", map[string]string{"type": "TYPE_0"}); got != 2 {
		t.Errorf("TYPE_0 = %v, want 2", got)
	}
	if n := len(testutil.MetricSeries(t, reg, "bridge_events_published_total")); n != MaxTypes+1 {
		t.Errorf("%d series, want %d", n, MaxTypes+1)
	}
}

// TestTypeOverflowDoesNotAllocate: once the cap is reached, an event of a new type counts under OtherType
// without allocating and without the lock, however many new types follow.
func TestTypeOverflowDoesNotAllocate(t *testing.T) {
	m, reg := newTestMetrics(t)
	for i := range MaxTypes {
		m.Published(fmt.Sprintf("TYPE_%d", i))
	}
	late := "LATE"
	if n := testing.AllocsPerRun(100, func() { m.Published(late) }); n != 0 {
		t.Errorf("a type past the cap allocates %v times", n)
	}
	if got := testutil.Metric(t, reg, "bridge_events_published_total", map[string]string{"type": OtherType}); got != 101 {
		t.Errorf("other = %v, want 101", got)
	}
	if n := len(testutil.MetricSeries(t, reg, "bridge_events_published_total")); n != MaxTypes+1 {
		t.Errorf("%d series, want %d", n, MaxTypes+1)
	}
}

// TestPerEventMetricsDoNotAllocate: what the publisher tells of every event costs no allocation once
// its type has been seen.
func TestPerEventMetricsDoNotAllocate(t *testing.T) {
	m, _ := newTestMetrics(t)
	m.Published("GATE_IN") // the first time creates the series
	for name, f := range map[string]func(){
		"Published":  func() { m.Published("GATE_IN") },
		"Duplicate":  func() { m.Duplicate("GATE_IN") },
		"AckLatency": func() { m.AckLatency(time.Millisecond, trace.TraceID{}) },
		"Freshness":  func() { m.Freshness(time.Second) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}

// TestPublishMetricsLabels: every reason and target has its series from start-up, a reason outside the
// set counts as other, and a type token that is not UTF-8 is a valid label value (the page stays one
// Prometheus reads).
func TestPublishMetricsLabels(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetrics(t)
	m.DeadLettered(ReasonNotJSON)
	m.DeadLettered("unheard of")
	m.PublishRetried(errors.New("timeout"))
	m.ForeignFenceWrite()
	m.ForeignLeaseWrite()
	m.ForeignLeaseWrite()
	m.Duplicate("GATE_IN")
	m.AckLatency(3*time.Millisecond, trace.TraceID{})
	m.Published("BAD\xff")
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bridge_events_dead_lettered_total", map[string]string{"reason": ReasonNotJSON}, 1},
		{"bridge_events_dead_lettered_total", map[string]string{"reason": "other"}, 1},
		{"bridge_events_dead_lettered_total", map[string]string{"reason": ReasonMaxPayload}, 0},
		{"bridge_publish_retries_total", nil, 1},
		{"bridge_foreign_writes_total", map[string]string{"target": "fence"}, 1},
		{"bridge_foreign_writes_total", map[string]string{"target": "lease"}, 2},
		{"bridge_events_duplicates_total", nil, 1},
		{"bridge_publish_ack_seconds", nil, 1},
		{"bridge_events_published_total", map[string]string{"type": "BAD\uFFFD"}, 1},
	} {
		if got := testutil.Metric(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if n := len(testutil.MetricSeries(t, reg, "bridge_events_dead_lettered_total")); n != len(deadLetterReasons) {
		t.Errorf("%d dead-letter series, want one per reason (%d)", n, len(deadLetterReasons))
	}
	if m.Duplicates() != 1 {
		t.Errorf("Duplicates() = %d, want 1", m.Duplicates())
	}
}
