package consume

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestConsumerMetrics: deliveries and outcomes by kind and status class, every known pair there from
// start-up and a new one added when told; the backlog read at scrape time.
func TestConsumerMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	pending := uint64(7)
	RegisterPending(reg, func() uint64 { return pending })
	m.Consumed()
	m.Consumed()
	m.Outcome("retry", "5xx")
	m.Outcome("new_kind", "none")
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bridge_reports_consumed_total", nil, 2},
		{"bridge_reports_outcomes_total", map[string]string{"outcome": "retry", "status_class": "5xx"}, 1},
		{"bridge_reports_outcomes_total", map[string]string{"outcome": "new_kind", "status_class": "none"}, 1},
		{"bridge_reports_outcomes_total", map[string]string{"outcome": "accepted", "status_class": "2xx"}, 0},
		{"bridge_reports_pending", nil, 7},
	} {
		if got := testutil.Metric(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if n, want := len(testutil.MetricSeries(t, reg, "bridge_reports_outcomes_total")), len(outcomeKinds)*len(statusClasses)+1; n != want {
		t.Errorf("%d outcome series, want %d", n, want)
	}
}

// TestConsumerMetricsDoNotAllocate: counting a delivery and its outcome costs no allocation.
func TestConsumerMetricsDoNotAllocate(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	for name, f := range map[string]func(){
		"Consumed": m.Consumed,
		"Outcome":  func() { m.Outcome("accepted", "2xx") },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}
