package service

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
)

// Metrics is the API service's series (docs/operations.md#metrics-reference) and its Observer. Every
// endpoint's series exist from start-up. Safe for concurrent use; a request's lookups cost no allocation.
type Metrics struct {
	requests *prometheus.CounterVec   // by endpoint and code
	duration *prometheus.HistogramVec // by endpoint
	refused  map[string]prometheus.Counter
	refVec   *prometheus.CounterVec
}

var _ Observer = (*Metrics)(nil)

// NewMetrics returns the API service's series, registered on reg. They are there whether or not the
// service runs (BRIDGE_API_ENABLED), so that dashboards and alerts see the same page on every bridge.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{refused: map[string]prometheus.Counter{}}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_api_requests_total",
		Help: "Requests answered by the API service (P.api.*), by endpoint and code: the upstream's status " +
			"on success (200 for units.get and units.events, answered from NATS), the Nats-Service-Error-Code on failure (400 " +
			"refused before calling, a body too large included, 404 no event of the unit in the units view, 502 unusable " +
			"answer, 503 unreachable, no token, busy or no units bucket, 504 timeout, else the upstream's status)."},
		[]string{"endpoint", "code"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metrics.Namespace + "_api_request_duration_seconds",
		Help:    "Time from receiving an API service request to sending its reply, by endpoint.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}},
		[]string{"endpoint"})
	for _, op := range Operations {
		m.duration.WithLabelValues(op.Name)
		m.requests.WithLabelValues(op.Name, metrics.StatusCode(op.Success))
	}
	m.refVec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_api_requests_refused_total",
		Help: "API service requests dropped without an answer and without an upstream call, by reason: " +
			"no_reply (none), reply_invalid (not a literal subject), reply_not_inbox (not under " +
			"BRIDGE_API_REPLY_PREFIXES)."}, []string{"reason"})
	for _, r := range RefusalReasons {
		m.refused[r] = m.refVec.WithLabelValues(r)
	}
	reg.MustRegister(m.requests, m.duration, m.refVec)
	return m
}

// APIServed implements Observer: one API request was answered with code after d.
func (m *Metrics) APIServed(endpoint string, code int, d time.Duration) {
	m.requests.WithLabelValues(endpoint, metrics.StatusCode(code)).Inc()
	m.duration.WithLabelValues(endpoint).Observe(d.Seconds())
}

// APIRefused implements Observer: one API request was dropped without an answer.
func (m *Metrics) APIRefused(reason string) {
	c, ok := m.refused[reason]
	if !ok {
		c = m.refVec.WithLabelValues(reason) // a reason added to this package: still bounded
	}
	c.Inc()
}
