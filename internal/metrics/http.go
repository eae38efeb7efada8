package metrics

import (
	"net/http"
	"strconv"
	"time"
)

// Upstream times the requests of the upstream HTTP clients (the token source's, the stream's, the
// report client's, the API service's): each client is instrumented with InstrumentTransport when it is
// built. Safe for concurrent use.
type Upstream struct {
	requests *Vec[Histogram]
}

// NewUpstream returns the upstream HTTP metrics, registered on reg.
func NewUpstream(reg *Registry) *Upstream {
	return &Upstream{requests: reg.NewHistogramVec(Namespace+"_upstream_request_duration_seconds",
		"Upstream HTTP requests until the response headers arrived, by operation (token, stream, "+
			"report) and status code (\"error\" when there was no response).",
		[]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}, []string{"operation", "code"})}
}

// InstrumentTransport returns rt wrapped so that every request is observed in
// bridge_upstream_request_duration_seconds, labelled with op(req) (one of Operations) and the response's
// status code. The time measured ends when the response headers arrived: for the event stream it is the
// time to connect.
func (m *Upstream) InstrumentTransport(rt http.RoundTripper, op func(*http.Request) string) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &instrumented{next: rt, op: op, vec: m.requests}
}

type instrumented struct {
	next http.RoundTripper
	op   func(*http.Request) string
	vec  *Vec[Histogram]
}

func (t *instrumented) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = statusCode(resp.StatusCode)
	}
	t.vec.With(t.op(req), code).Observe(time.Since(start).Seconds())
	return resp, err
}

// statusCode renders a status code for a label: the number for the codes net/http knows, else its class.
func statusCode(c int) string {
	if http.StatusText(c) != "" {
		return strconv.Itoa(c)
	}
	if c >= 100 && c < 600 {
		return strconv.Itoa(c/100) + "xx"
	}
	return "other"
}
