package metrics

import (
	"strconv"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/service"
)

// API is the API service's metrics (contract §7), its service.Observer. Its methods are safe for
// concurrent use.
type API struct {
	requests   *Vec[Counter]
	duration   *Vec[Histogram]
	refused    map[string]*Counter
	refusedVec *Vec[Counter]
}

var _ service.Observer = (*API)(nil)

// NewAPI returns the API service's metrics, registered on reg.
func NewAPI(reg *Registry) *API {
	m := &API{refused: map[string]*Counter{}}
	m.requests = reg.NewCounterVec(Namespace+"_api_requests_total",
		"Requests answered by the API service (P.api.*), by endpoint and code: the upstream's status "+
			"on success, the Nats-Service-Error-Code on failure (400 refused before calling, a body too large included, 502 unusable "+
			"answer, 503 unreachable, no token or busy, 504 timeout, else the upstream's status).",
		[]string{"endpoint", "code"})
	m.duration = reg.NewHistogramVec(Namespace+"_api_request_duration_seconds",
		"Time from receiving an API service request to sending its reply, by endpoint.",
		[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}, []string{"endpoint"})
	for _, op := range service.Operations {
		m.duration.With(op.Name)
		m.requests.With(op.Name, strconv.Itoa(op.Success))
	}
	m.refusedVec = reg.NewCounterVec(Namespace+"_api_requests_refused_total",
		"API service requests dropped without an answer and without an upstream call, by reason: "+
			"no_reply (none), reply_invalid (not a literal subject), reply_not_inbox (not under "+
			"BRIDGE_API_REPLY_PREFIXES).", []string{"reason"})
	for _, r := range service.RefusalReasons {
		m.refused[r] = m.refusedVec.With(r)
	}
	return m
}

// APIServed implements service.Observer: one API request was answered with code after d.
func (m *API) APIServed(endpoint string, code int, d time.Duration) {
	m.requests.With(endpoint, statusCode(code)).Inc()
	m.duration.With(endpoint).Observe(d.Seconds())
}

// APIRefused implements service.Observer: one API request was dropped without an answer.
func (m *API) APIRefused(reason string) {
	c, ok := m.refused[reason]
	if !ok {
		c = m.refusedVec.With(reason) // a reason added to service: still bounded
	}
	c.Inc()
}
