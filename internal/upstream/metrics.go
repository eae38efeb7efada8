package upstream

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
)

// The upstream side's series (docs/operations.md#metrics-reference): the event stream's (StreamMetrics,
// RegisterStreamState) and the HTTP clients' and token source's (ClientMetrics). Every label value set is
// closed, and created with value 0 at start-up so that rate() and absent-series alerts work from the
// first scrape.

// disconnectReasons are the reason label values of bridge_stream_disconnects_total.
var disconnectReasons = []string{DisconnectEOF, DisconnectIdle, DisconnectStatus, DisconnectError}

// StreamMetrics is the event stream's series and its StreamObserver, and what it saw last, for the status
// page (Activity). Its per-event methods cost a few atomic operations and no allocation. Safe for
// concurrent use.
type StreamMetrics struct {
	start       time.Time
	received    prometheus.Counter
	connects    prometheus.Counter
	disconnects map[string]prometheus.Counter // by reason, every one of disconnectReasons
	lastEvent   atomic.Int64                  // unix nanoseconds
	lastBytes   atomic.Int64                  // unix nanoseconds
	idMu        sync.Mutex
	lastID      string // of the last event read; "" while none had an id
}

var _ StreamObserver = (*StreamMetrics)(nil)

// NewStreamMetrics returns the event stream's series, registered on reg.
func NewStreamMetrics(reg prometheus.Registerer) *StreamMetrics {
	m := &StreamMetrics{start: time.Now(), disconnects: map[string]prometheus.Counter{}}
	m.lastEvent.Store(m.start.UnixNano())
	m.lastBytes.Store(m.start.UnixNano())
	m.received = prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "_events_received_total",
		Help: "Messages with data read from the upstream event stream, before publishing."})
	m.connects = prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "_stream_connects_total",
		Help: "Successful connections to the upstream event stream."})
	disconnects := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_stream_disconnects_total",
		Help: "Ends of established event stream connections, by reason: eof (closed by the upstream), " +
			"idle (no byte within the idle timeout), status, error."}, []string{"reason"})
	for _, r := range disconnectReasons {
		m.disconnects[r] = disconnects.WithLabelValues(r)
	}
	// The ages of the stream's last event and last bytes, at scrape time.
	age := func(ns *atomic.Int64) func() float64 {
		return func() float64 { return max(0, time.Since(time.Unix(0, ns.Load())).Seconds()) }
	}
	reg.MustRegister(m.received, m.connects, disconnects,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metrics.Namespace + "_stream_last_event_age_seconds",
			Help: "Seconds since the last event was read from the upstream stream (since start-up when none was)."},
			age(&m.lastEvent)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metrics.Namespace + "_stream_last_heartbeat_age_seconds",
			Help: "Seconds since the last bytes (event or keep-alive comment) arrived on the upstream stream, or since the connection was made."},
			age(&m.lastBytes)))
	return m
}

// Connected implements StreamObserver.
func (m *StreamMetrics) Connected() {
	m.connects.Inc()
	m.lastBytes.Store(time.Now().UnixNano())
}

// Disconnected implements StreamObserver; a reason outside the set counts as DisconnectError.
func (m *StreamMetrics) Disconnected(reason string) {
	c, ok := m.disconnects[reason]
	if !ok {
		c = m.disconnects[DisconnectError]
	}
	c.Inc()
}

// Received implements StreamObserver: one message with data was read. Its time is that of the read that
// brought its last bytes (Heartbeat), which spares a clock reading per event.
func (m *StreamMetrics) Received(ev *Event) {
	m.received.Inc()
	m.lastEvent.Store(m.lastBytes.Load())
	if ev.ID != "" {
		m.idMu.Lock()
		m.lastID = ev.ID
		m.idMu.Unlock()
	}
}

// Heartbeat implements StreamObserver: bytes arrived on the stream.
func (m *StreamMetrics) Heartbeat() { m.lastBytes.Store(time.Now().UnixNano()) }

// StreamActivity is what the stream's metrics saw last, for the status page.
type StreamActivity struct {
	LastID    string    // id of the last event read; "" while none had one
	LastEvent time.Time // when the last event was read; zero while none was
	LastBytes time.Time // when bytes (event or keep-alive) last arrived; zero while none did
}

// Activity returns the stream's last activity. Event ids are shown there and never as a label, where each
// new id would start a new series.
func (m *StreamMetrics) Activity() StreamActivity {
	at := func(ns int64) time.Time {
		if ns == m.start.UnixNano() {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	m.idMu.Lock()
	id := m.lastID
	m.idMu.Unlock()
	return StreamActivity{LastID: id, LastEvent: at(m.lastEvent.Load()), LastBytes: at(m.lastBytes.Load())}
}

// streamStates are the state label values of bridge_stream_state.
var streamStates = []StreamState{StateStarting, StateConnected, StateReconnecting, StateUnavailable, StateStopped}

// RegisterStreamState registers bridge_stream_state on reg: 1 for the stream's current state, read with
// state (Stream.State) at scrape time, 0 for the others.
func RegisterStreamState(reg prometheus.Registerer, state func() StreamState) {
	reg.MustRegister(metrics.NewFunc(metrics.Namespace+"_stream_state",
		"1 for the event stream's current state: starting, connected, reconnecting, unavailable (403/404) or stopped.",
		prometheus.GaugeValue, []string{"state"}, func(emit func(float64, ...string)) {
			cur := state()
			for _, st := range streamStates {
				emit(metrics.Bool(st == cur), st.String())
			}
		}))
}

// Token request kinds (TokenConfig.Observe) and results, the labels of bridge_token_requests_total.
var (
	tokenKinds   = []string{"login", "refresh"}
	tokenResults = []string{"ok", "rejected", "unavailable"}
)

// ClientMetrics is the series of the upstream HTTP clients (the time of every request, InstrumentTransport)
// and of the token source (TokenObserved). Safe for concurrent use.
type ClientMetrics struct {
	requests *prometheus.HistogramVec
	tokens   map[[2]string]prometheus.Counter // by kind and result
}

// NewClientMetrics returns the upstream HTTP clients' and the token source's series, registered on reg.
func NewClientMetrics(reg prometheus.Registerer) *ClientMetrics {
	m := &ClientMetrics{tokens: map[[2]string]prometheus.Counter{}}
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: metrics.Namespace + "_upstream_request_duration_seconds",
		Help: "Upstream HTTP requests until the response headers arrived, by operation (token, stream, " +
			"report) and status code (\"error\" when there was no response).",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"operation", "code"})
	tokens := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_token_requests_total",
		Help: "Token endpoint requests by kind (login, refresh) and result (ok, rejected, unavailable)."},
		[]string{"kind", "result"})
	for _, k := range tokenKinds {
		for _, r := range tokenResults {
			m.tokens[[2]string{k, r}] = tokens.WithLabelValues(k, r)
		}
	}
	reg.MustRegister(m.requests, tokens)
	return m
}

// TokenObserved counts one token request; it is a TokenConfig.Observe. A kind outside the set is not
// counted.
func (m *ClientMetrics) TokenObserved(kind string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrTokenEndpoint):
		result = "unavailable"
	default:
		result = "rejected"
	}
	if c, ok := m.tokens[[2]string{kind, result}]; ok {
		c.Inc()
	}
}

// InstrumentTransport returns rt (http.DefaultTransport when nil) wrapped so that every request is
// observed in bridge_upstream_request_duration_seconds, labelled with op(req) (token, stream, report or other) and the
// response's status code (metrics.StatusCode), "error" when there was none. The time ends when the
// response headers arrived: for the event stream it is the time to connect.
func (m *ClientMetrics) InstrumentTransport(rt http.RoundTripper, op func(*http.Request) string) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &instrumented{next: rt, op: op, vec: m.requests}
}

type instrumented struct {
	next http.RoundTripper
	op   func(*http.Request) string
	vec  *prometheus.HistogramVec
}

func (t *instrumented) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = metrics.StatusCode(resp.StatusCode)
	}
	t.vec.WithLabelValues(t.op(req), code).Observe(time.Since(start).Seconds())
	return resp, err
}
