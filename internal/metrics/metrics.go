// Package metrics holds the bridge's Prometheus metrics. Every name starts with "bridge_" and every label
// has a small, bounded set of values: event types are capped at MaxTypes distinct values (the rest count
// under "other"), HTTP requests are labelled by operation and status code, never by URL or id.
//
// A Metrics implements the observer interfaces of the components, so that cmd/bridge can hand it to
// each of them: upstream.StreamObserver (the event stream), publish.Observer (JetStream publishing),
// consume.Observer (the report consumer), service.Observer (the API service) and, through TokenObserved, upstream.TokenConfig.Observe. Its
// per-event methods cost a few atomic operations and no allocation once a type has been seen.
//
// Values that belong to another component (the stream's state, the resume cursor, the consumer's
// backlog, the NATS connection, readiness) are read at scrape time from the functions in Sources.
//
// The registry is the caller's: New registers the bridge's collectors on it and nothing on the global
// registry.
package metrics

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/event"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Namespace starts every metric name.
const Namespace = "bridge"

// MaxTypes bounds the distinct values of the type label of bridge_events_published_total. Events of
// further types are counted under OtherType.
const MaxTypes = 100

// OtherType is the type label of events beyond the first MaxTypes types.
const OtherType = "other"

// Label values of bounded sets. They are created with value 0 at start-up, so that rate() and
// absent-series alerts work from the first scrape.
var (
	// DisconnectReasons are the reason label values of bridge_stream_disconnects_total.
	DisconnectReasons = []string{upstream.DisconnectEOF, upstream.DisconnectIdle, upstream.DisconnectStatus, upstream.DisconnectError}
	// DeadLetterReasons are the reason label values of bridge_events_dead_lettered_total.
	DeadLetterReasons = []string{publish.ReasonNotJSON, publish.ReasonOversize, publish.ReasonMaxPayload, publish.ReasonMaxMsgSize, "other"}
	// TokenKinds and TokenResults are the labels of bridge_token_requests_total.
	TokenKinds   = []string{"login", "refresh"}
	TokenResults = []string{"ok", "rejected", "unavailable"}
	// ReportOutcomes and StatusClasses are the labels of bridge_reports_outcomes_total.
	ReportOutcomes = []string{"accepted", "retry", "rejected", "invalid", "expired"}
	StatusClasses  = []string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}
	// Operations are the operation label values of bridge_upstream_request_duration_seconds.
	Operations = []string{"token", "stream", "report", "other"}
	// StreamStates are the state label values of bridge_stream_state.
	StreamStates = []upstream.StreamState{upstream.StateStarting, upstream.StateConnected,
		upstream.StateReconnecting, upstream.StateUnavailable, upstream.StateStopped}
)

// Sources are the values Metrics reads from the components at scrape time. A nil field leaves its
// metric out. The functions are called from the scraping goroutine and must be safe for concurrent use.
type Sources struct {
	// StreamState is the event stream's state (upstream.Stream.State).
	StreamState func() upstream.StreamState
	// ReportsPending is the report consumer's backlog (consume.Consumer.Pending).
	ReportsPending func() uint64
	// NATSConnected reports whether the NATS connection is up (nats.Conn.IsConnected).
	NATSConnected func() bool
	// NATSReconnects is the number of NATS reconnections (nats.Conn.Stats().Reconnects).
	NATSReconnects func() uint64
	// Readiness returns each readiness check's name and whether it passes.
	Readiness func() map[string]bool
	// Leader reports whether this bridge holds the lease and reads the upstream stream (contract §6).
	Leader func() bool
}

// Metrics is the bridge's set of metrics. Its methods are safe for concurrent use.
type Metrics struct {
	start time.Time

	// Event stream.
	received      prometheus.Counter
	connects      prometheus.Counter
	disconnects   map[string]prometheus.Counter
	disconnectVec *prometheus.CounterVec
	lastEvent     atomic.Int64 // unix nanoseconds
	lastBytes     atomic.Int64 // unix nanoseconds
	idMu          sync.Mutex
	lastID        string // of the last event read; "" while none had an id

	// Publishing.
	typesMu     sync.Mutex
	types       map[string]prometheus.Counter
	publishedBy *prometheus.CounterVec
	other       prometheus.Counter
	ackSeconds  prometheus.Histogram
	retries     prometheus.Counter
	deadLetters map[string]prometheus.Counter
	duplicates  prometheus.Counter
	dupCount    atomic.Uint64 // duplicates, for the status page

	// Token source.
	tokens map[[2]string]prometheus.Counter

	// Report consumer.
	consumed prometheus.Counter
	outcomes map[[2]string]prometheus.Counter
	outVec   *prometheus.CounterVec

	// Upstream HTTP.
	requests *prometheus.HistogramVec

	// The API service (contract §7).
	apiRequests *prometheus.CounterVec
	apiDuration *prometheus.HistogramVec
	apiRefused  map[string]prometheus.Counter
	refusedVec  *prometheus.CounterVec

	src atomic.Pointer[Sources]
}

// BuildInfo is the version information shown by bridge_build_info.
type BuildInfo struct {
	Version, Commit, GoVersion string
}

// New returns the bridge's metrics, registered on reg.
func New(reg prometheus.Registerer, build BuildInfo) *Metrics {
	m := &Metrics{
		start:       time.Now(),
		disconnects: map[string]prometheus.Counter{},
		types:       map[string]prometheus.Counter{},
		deadLetters: map[string]prometheus.Counter{},
		tokens:      map[[2]string]prometheus.Counter{},
		outcomes:    map[[2]string]prometheus.Counter{},
		apiRefused:  map[string]prometheus.Counter{},
	}
	m.lastEvent.Store(m.start.UnixNano())
	m.lastBytes.Store(m.start.UnixNano())
	m.src.Store(&Sources{})

	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info",
		Help:        "Always 1; the labels name the bridge's version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": build.Version, "commit": build.Commit, "go_version": build.GoVersion},
	})
	buildInfo.Set(1)

	m.received = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "events_received_total",
		Help: "Messages with data read from the upstream event stream, before publishing.",
	})
	m.publishedBy = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "events_published_total",
		Help: "Events stored in the events stream (JetStream acknowledged), by type subject token; " +
			"types beyond the first " + strconv.Itoa(MaxTypes) + " count as \"" + OtherType + "\".",
	}, []string{"type"})
	m.other = m.publishedBy.WithLabelValues(OtherType)
	deadVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "events_dead_lettered_total",
		Help: "Upstream events sent to P.dlq.events instead of P.events.*, by reason: not_json, oversize, max_payload, max_msg_size.",
	}, []string{"reason"})
	for _, r := range DeadLetterReasons {
		m.deadLetters[r] = deadVec.WithLabelValues(r)
	}
	m.ackSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "publish_ack_seconds",
		Help:    "Time from publishing an event to its JetStream acknowledgement.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15), // 0.5 ms … 8 s
	})
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "publish_retries_total",
		Help: "Publishes sent again after a failed or unacknowledged attempt.",
	})
	m.duplicates = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "events_duplicates_total",
		Help: "Events found stored before and not stored again: acknowledged by JetStream as duplicates (an " +
			"event with the same Nats-Msg-Id was stored within the duplicate window), or skipped by the bridge " +
			"as stored beyond its resume point when the upstream replays them after a restart or reconnect.",
	})

	m.connects = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "stream_connects_total",
		Help: "Successful connections to the upstream event stream.",
	})
	m.disconnectVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "stream_disconnects_total",
		Help: "Ends of established event stream connections, by reason: eof (closed by the upstream), " +
			"idle (no byte within the idle timeout), status, error.",
	}, []string{"reason"})
	for _, r := range DisconnectReasons {
		m.disconnects[r] = m.disconnectVec.WithLabelValues(r)
	}

	tokVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "token_requests_total",
		Help: "Token endpoint requests by kind (login, refresh) and result (ok, rejected, unavailable).",
	}, []string{"kind", "result"})
	for _, k := range TokenKinds {
		for _, r := range TokenResults {
			m.tokens[[2]string{k, r}] = tokVec.WithLabelValues(k, r)
		}
	}

	m.consumed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "reports_consumed_total",
		Help: "Report deliveries taken from the reports stream, redeliveries included.",
	})
	m.outVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "reports_outcomes_total",
		Help: "Settled report deliveries by outcome (accepted, retry, rejected, invalid, expired) and class " +
			"of the upstream's HTTP status (none when it did not answer).",
	}, []string{"outcome", "status_class"})
	for _, o := range ReportOutcomes {
		for _, c := range StatusClasses {
			m.outcomes[[2]string{o, c}] = m.outVec.WithLabelValues(o, c)
		}
	}

	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "upstream_request_duration_seconds",
		Help: "Upstream HTTP requests until the response headers arrived, by operation (token, stream, " +
			"report) and status code (\"error\" when there was no response).",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"operation", "code"})

	m.apiRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "api_requests_total",
		Help: "Requests answered by the API service (P.api.*), by endpoint and code: the upstream's status " +
			"on success, the Nats-Service-Error-Code on failure (400 refused before calling, 413 body too large, 502 unusable " +
			"answer, 503 unreachable, no token or busy, 504 timeout, else the upstream's status).",
	}, []string{"endpoint", "code"})
	m.apiDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "api_request_duration_seconds",
		Help:    "Time from receiving an API service request to sending its reply, by endpoint.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"endpoint"})
	for _, op := range service.Operations {
		m.apiDuration.WithLabelValues(op.Name)
		m.apiRequests.WithLabelValues(op.Name, strconv.Itoa(op.Success))
	}
	m.refusedVec = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "api_requests_refused_total",
		Help: "API service requests dropped without an answer and without an upstream call, by reason: " +
			"no_reply (none), reply_invalid (not a literal subject), reply_not_inbox (not under " +
			"BRIDGE_API_REPLY_PREFIXES).",
	}, []string{"reason"})
	for _, r := range service.RefusalReasons {
		m.apiRefused[r] = m.refusedVec.WithLabelValues(r)
	}

	reg.MustRegister(buildInfo, m.received, m.publishedBy, deadVec, m.ackSeconds, m.retries, m.duplicates, m.connects,
		m.disconnectVec, tokVec, m.consumed, m.outVec, m.requests, m.apiRequests, m.apiDuration, m.refusedVec,
		&scrapeCollector{m: m})
	return m
}

// SetSources sets the functions read at scrape time. Call it once the components exist.
func (m *Metrics) SetSources(s Sources) { m.src.Store(&s) }

// Compile-time checks that Metrics implements the components' observer interfaces.
var (
	_ upstream.StreamObserver = (*Metrics)(nil)
	_ publish.Observer        = (*Metrics)(nil)
	_ consume.Observer        = (*Metrics)(nil)
	_ service.Observer        = (*Metrics)(nil)
)

// Connected implements upstream.StreamObserver.
func (m *Metrics) Connected() {
	m.connects.Inc()
	m.lastBytes.Store(time.Now().UnixNano())
}

// Disconnected implements upstream.StreamObserver.
func (m *Metrics) Disconnected(reason string) {
	c, ok := m.disconnects[reason]
	if !ok {
		c = m.disconnects[upstream.DisconnectError]
	}
	c.Inc()
}

// Received implements upstream.StreamObserver: one message with data was read. Its time is that of the
// read that brought its last bytes (Heartbeat), which spares a clock reading per event.
func (m *Metrics) Received(ev *event.Event) {
	m.received.Inc()
	m.lastEvent.Store(m.lastBytes.Load())
	if ev.ID != "" {
		m.idMu.Lock()
		m.lastID = ev.ID
		m.idMu.Unlock()
	}
}

// StreamActivity is what the stream observer saw last, for the status page.
type StreamActivity struct {
	LastID    string    // id of the last event read; "" while none had one
	LastEvent time.Time // when the last event was read; zero while none was
	LastBytes time.Time // when bytes (event or keep-alive) last arrived; zero while none did
}

// StreamActivity returns the stream's last activity.
func (m *Metrics) StreamActivity() StreamActivity {
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

// Heartbeat implements upstream.StreamObserver: bytes arrived on the stream.
func (m *Metrics) Heartbeat() { m.lastBytes.Store(time.Now().UnixNano()) }

// Published implements publish.Observer: the event was stored; typeToken is its subject's last token.
func (m *Metrics) Published(typeToken string) { m.typeCounter(typeToken).Inc() }

// Duplicate implements publish.Observer: the event was stored before and is not stored again.
func (m *Metrics) Duplicate(string) {
	m.duplicates.Inc()
	m.dupCount.Add(1)
}

// Duplicates returns how many events were found stored before since start-up (see Duplicate).
func (m *Metrics) Duplicates() uint64 { return m.dupCount.Load() }

// AckLatency implements publish.Observer.
func (m *Metrics) AckLatency(d time.Duration) { m.ackSeconds.Observe(d.Seconds()) }

// typeCounter returns the counter of a type token, creating it for the first MaxTypes tokens.
func (m *Metrics) typeCounter(token string) prometheus.Counter {
	m.typesMu.Lock()
	defer m.typesMu.Unlock()
	if c, ok := m.types[token]; ok {
		return c
	}
	if len(m.types) >= MaxTypes {
		return m.other
	}
	token = strings.Clone(token) // do not pin the buffer the token may point into
	c := m.publishedBy.WithLabelValues(token)
	m.types[token] = c
	return c
}

// DeadLettered implements publish.Observer; reason is one of the publish.Reason* constants.
func (m *Metrics) DeadLettered(reason string) {
	c, ok := m.deadLetters[reason]
	if !ok {
		c = m.deadLetters["other"]
	}
	c.Inc()
}

// PublishRetried implements publish.Observer.
func (m *Metrics) PublishRetried(error) { m.retries.Inc() }

// TokenObserved counts one token request; it has the signature of upstream.TokenConfig.Observe.
func (m *Metrics) TokenObserved(kind string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, upstream.ErrTokenEndpoint):
		result = "unavailable"
	default:
		result = "rejected"
	}
	if c, ok := m.tokens[[2]string{kind, result}]; ok {
		c.Inc()
	}
}

// Consumed implements consume.Observer.
func (m *Metrics) Consumed() { m.consumed.Inc() }

// Outcome implements consume.Observer.
func (m *Metrics) Outcome(kind, statusClass string) {
	c, ok := m.outcomes[[2]string{kind, statusClass}]
	if !ok {
		c = m.outVec.WithLabelValues(kind, statusClass) // a value added to consume: still bounded
	}
	c.Inc()
}

// APIServed implements service.Observer: one API request was answered with code after d.
func (m *Metrics) APIServed(endpoint string, code int, d time.Duration) {
	m.apiRequests.WithLabelValues(endpoint, statusCode(code)).Inc()
	m.apiDuration.WithLabelValues(endpoint).Observe(d.Seconds())
}

// APIRefused implements service.Observer: one API request was dropped without an answer.
func (m *Metrics) APIRefused(reason string) {
	c, ok := m.apiRefused[reason]
	if !ok {
		c = m.refusedVec.WithLabelValues(reason) // a reason added to service: still bounded
	}
	c.Inc()
}

// InstrumentTransport returns rt wrapped so that every request is observed in
// bridge_upstream_request_duration_seconds, labelled with op(req) (one of Operations) and the response's
// status code. The time measured ends when the response headers arrived: for the event stream it is the
// time to connect.
func (m *Metrics) InstrumentTransport(rt http.RoundTripper, op func(*http.Request) string) http.RoundTripper {
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
		code = statusCode(resp.StatusCode)
	}
	t.vec.WithLabelValues(t.op(req), code).Observe(time.Since(start).Seconds())
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

// scrapeCollector reports the values read at scrape time.
type scrapeCollector struct{ m *Metrics }

var (
	descEventAge = prometheus.NewDesc(Namespace+"_stream_last_event_age_seconds",
		"Seconds since the last event was read from the upstream stream (since start-up when none was).", nil, nil)
	descBytesAge = prometheus.NewDesc(Namespace+"_stream_last_heartbeat_age_seconds",
		"Seconds since the last bytes (event or keep-alive comment) arrived on the upstream stream, or since the connection was made.", nil, nil)
	descState = prometheus.NewDesc(Namespace+"_stream_state",
		"1 for the event stream's current state: starting, connected, reconnecting, unavailable (403/404) or stopped.", []string{"state"}, nil)
	descPending = prometheus.NewDesc(Namespace+"_reports_pending",
		"Reports in the reports stream not yet settled: waiting, in flight, or waiting for a delayed redelivery.", nil, nil)
	descNATSUp = prometheus.NewDesc(Namespace+"_nats_connected",
		"1 while the NATS connection is up.", nil, nil)
	descNATSReconnects = prometheus.NewDesc(Namespace+"_nats_reconnects_total",
		"NATS reconnections since start-up.", nil, nil)
	descReady = prometheus.NewDesc(Namespace+"_ready",
		"1 when the readiness check passes (the same checks as /readyz).", []string{"check"}, nil)
	descLeader = prometheus.NewDesc(Namespace+"_leader",
		"1 while this bridge holds the lease and reads the upstream stream, 0 on a standby.", nil, nil)
)

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEventAge, descBytesAge, descState, descPending,
		descNATSUp, descNATSReconnects, descReady, descLeader} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	now := time.Now()
	age := func(ns int64) float64 { return max(0, now.Sub(time.Unix(0, ns)).Seconds()) }
	ch <- prometheus.MustNewConstMetric(descEventAge, prometheus.GaugeValue, age(m.lastEvent.Load()))
	ch <- prometheus.MustNewConstMetric(descBytesAge, prometheus.GaugeValue, age(m.lastBytes.Load()))

	src := m.src.Load()
	if src.StreamState != nil {
		cur := src.StreamState()
		for _, st := range StreamStates {
			v := 0.0
			if st == cur {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, st.String())
		}
	}
	if src.ReportsPending != nil {
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(src.ReportsPending()))
	}
	if src.NATSConnected != nil {
		v := 0.0
		if src.NATSConnected() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descNATSUp, prometheus.GaugeValue, v)
	}
	if src.NATSReconnects != nil {
		ch <- prometheus.MustNewConstMetric(descNATSReconnects, prometheus.CounterValue, float64(src.NATSReconnects()))
	}
	if src.Leader != nil {
		v := 0.0
		if src.Leader() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, v)
	}
	if src.Readiness != nil {
		for name, ok := range src.Readiness() {
			v := 0.0
			if ok {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, v, name)
		}
	}
}
