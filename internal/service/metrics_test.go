package service

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestServiceMetrics: every endpoint's series and every refusal reason exist from start-up; requests are
// counted by endpoint and code, refusals by reason.
func TestServiceMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	m.APIServed("orders.get", 404, 3*time.Millisecond)
	m.APIServed("orders.get", 200, time.Millisecond)
	m.APIServed("orders.get", 299, time.Millisecond)
	m.APIRefused(RefusedReplyNotInbox)
	m.APIRefused(RefusedReplyNotInbox)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bridge_api_requests_total", map[string]string{"endpoint": "orders.get", "code": "404"}, 1},
		{"bridge_api_requests_total", map[string]string{"endpoint": "orders.get", "code": "200"}, 1},
		{"bridge_api_requests_total", map[string]string{"endpoint": "orders.get", "code": "2xx"}, 1},
		{"bridge_api_requests_total", map[string]string{"endpoint": "orders.create", "code": "201"}, 0},
		{"bridge_api_request_duration_seconds", map[string]string{"endpoint": "orders.get"}, 3},
		{"bridge_api_requests_refused_total", map[string]string{"reason": RefusedNoReply}, 0},
		{"bridge_api_requests_refused_total", map[string]string{"reason": RefusedReplyNotInbox}, 2},
	} {
		if got := testutil.Metric(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if n := len(testutil.MetricSeries(t, reg, "bridge_api_request_duration_seconds")); n != len(Operations) {
		t.Errorf("%d duration series, want one per endpoint (%d)", n, len(Operations))
	}
	if n := len(testutil.MetricSeries(t, reg, "bridge_api_requests_refused_total")); n != len(RefusalReasons) {
		t.Errorf("%d refusal series, want one per reason (%d)", n, len(RefusalReasons))
	}
}

// TestServiceMetricsDoNotAllocate: counting an answered request (endpoint, code, time) costs no
// allocation once its series exists.
func TestServiceMetricsDoNotAllocate(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	endpoint, code := "orders.get", 200
	if n := testing.AllocsPerRun(100, func() { m.APIServed(endpoint, code, time.Millisecond) }); n != 0 {
		t.Errorf("APIServed allocates %v times per call", n)
	}
}
