package publish

import (
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
)

// MaxTypes bounds the distinct values of the type label of bridge_events_published_total: events of
// further types count under OtherType, so that an upstream inventing types cannot grow the page without
// end.
const MaxTypes = 100

// OtherType is the type label of the events beyond the first MaxTypes types.
const OtherType = "other"

// deadLetterReasons are the reason label values of bridge_events_dead_lettered_total: the Reason*
// constants, and "other" for a reason added without its own series.
var deadLetterReasons = []string{ReasonNotJSON, ReasonOversize, ReasonMaxPayload, ReasonMaxMsgSize, "other"}

// Metrics is JetStream publishing's series (docs/operations.md#metrics-reference) and its Observer, made
// once and handed to every term's publisher. The per-event methods (Published, Duplicate, AckLatency) cost
// a few atomic operations and no allocation once a type has been seen. Safe for concurrent use.
type Metrics struct {
	published   typeCounters
	ack         prometheus.Histogram
	fresh       prometheus.Histogram
	retries     prometheus.Counter
	deadLetters map[string]prometheus.Counter // every one of deadLetterReasons
	duplicates  atomic.Uint64                 // bridge_events_duplicates_total, and /status
	foreign     map[string]prometheus.Counter // by target: lease, fence
}

var _ Observer = (*Metrics)(nil)

// NewMetrics returns the publishing series, registered on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{deadLetters: map[string]prometheus.Counter{}, foreign: map[string]prometheus.Counter{}}
	published := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_events_published_total",
		Help: "Events stored in the events stream (JetStream acknowledged), by type subject token; " +
			"types beyond the first " + strconv.Itoa(MaxTypes) + " count as \"" + OtherType + "\"."}, []string{"type"})
	m.published.init(published, MaxTypes+1, OtherType)
	deadLetters := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_events_dead_lettered_total",
		Help: "Upstream events sent to P.dlq.events instead of P.events.*, by reason: not_json, oversize, max_payload, max_msg_size."},
		[]string{"reason"})
	for _, r := range deadLetterReasons {
		m.deadLetters[r] = deadLetters.WithLabelValues(r)
	}
	m.ack = prometheus.NewHistogram(prometheus.HistogramOpts{Name: metrics.Namespace + "_publish_ack_seconds",
		Help:    "Time from publishing an event to its JetStream acknowledgement.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15)}) // 0.5 ms … 8 s
	m.fresh = prometheus.NewHistogram(prometheus.HistogramOpts{Name: metrics.Namespace + "_event_freshness_seconds",
		Help: "Time from an event's own timestamp to its JetStream acknowledgement (events published, not " +
			"duplicates, whose timestamp is an RFC 3339 time; one dated ahead counts as 0).",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 20)}) // 10 ms … 1.5 h
	m.retries = prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "_publish_retries_total",
		Help: "Publishes sent again after a failed or unacknowledged attempt."})
	duplicates := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: metrics.Namespace + "_events_duplicates_total",
		Help: "Events found stored before and not stored again: acknowledged by JetStream as duplicates (an " +
			"event with the same Nats-Msg-Id was stored within the duplicate window), or skipped by the bridge " +
			"as stored beyond its resume point when the upstream replays them after a restart or reconnect."},
		func() float64 { return float64(m.duplicates.Load()) })
	foreign := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_foreign_writes_total",
		Help: "Times the bridge found and wrote over what another client than a bridge wrote where only bridges " +
			"write: the lease key (target lease), a fence subject or the restart subject (target fence); many " +
			"messages piled up on one subject count once. In a NATS account shared with clients, JetStream " +
			"stores its acknowledgement of a client's publish on the reply subject the client chose."},
		[]string{"target"})
	for _, t := range []string{"lease", "fence"} {
		m.foreign[t] = foreign.WithLabelValues(t)
	}
	reg.MustRegister(published, deadLetters, m.ack, m.fresh, m.retries, duplicates, foreign)
	return m
}

// Published implements Observer: the event was stored; typeToken is its subject's last token.
func (m *Metrics) Published(typeToken string) { m.published.get(typeToken).Inc() }

// Duplicate implements Observer: the event was stored before and is not stored again.
func (m *Metrics) Duplicate(string) { m.duplicates.Add(1) }

// Duplicates returns how many events were found stored before since start-up (see Duplicate).
func (m *Metrics) Duplicates() uint64 { return m.duplicates.Load() }

// AckLatency implements Observer. An event with a sampled trace leaves its trace id as the bucket's
// exemplar, which /metrics shows in the OpenMetrics format.
func (m *Metrics) AckLatency(d time.Duration, traceID trace.TraceID) {
	if !traceID.IsValid() {
		m.ack.Observe(d.Seconds())
		return
	}
	m.ack.(prometheus.ExemplarObserver).ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID.String()})
}

// Freshness implements Observer.
func (m *Metrics) Freshness(d time.Duration) { m.fresh.Observe(max(d, 0).Seconds()) }

// DeadLettered implements Observer; a reason outside the Reason* constants counts as "other".
func (m *Metrics) DeadLettered(reason string) {
	c, ok := m.deadLetters[reason]
	if !ok {
		c = m.deadLetters["other"]
	}
	c.Inc()
}

// PublishRetried implements Observer.
func (m *Metrics) PublishRetried(error) { m.retries.Inc() }

// ForeignFenceWrite implements Observer.
func (m *Metrics) ForeignFenceWrite() { m.foreign["fence"].Inc() }

// ForeignLeaseWrite counts a foreign value found in the lease key (the lease's OnForeignWrite). The
// lease and the fence are the event path's terms of leadership: their foreign writes are one family.
func (m *Metrics) ForeignLeaseWrite() { m.foreign["lease"].Inc() }

// typeCounters is a counter family by one label, bounded to limit children, the overflow child among
// them: a value first seen once the family is full counts under overflow. A lookup of a value seen before
// is one atomic load and a map read: the map is replaced, never changed, when a value is added.
type typeCounters struct {
	vec      *prometheus.CounterVec
	limit    int
	overflow prometheus.Counter
	byValue  atomic.Pointer[map[string]prometheus.Counter]
	mu       sync.Mutex // serializes additions
}

func (t *typeCounters) init(vec *prometheus.CounterVec, limit int, overflow string) {
	t.vec, t.limit = vec, limit
	t.overflow = vec.WithLabelValues(overflow)
	t.byValue.Store(&map[string]prometheus.Counter{overflow: t.overflow})
}

// get returns the counter of value, creating it when there is room.
func (t *typeCounters) get(value string) prometheus.Counter {
	cur := *t.byValue.Load()
	if c, ok := cur[value]; ok {
		return c
	}
	if len(cur) >= t.limit {
		return t.overflow // without the lock or an allocation: past the limit, every event may land here
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur = *t.byValue.Load()
	if c, ok := cur[value]; ok {
		return c
	}
	if len(cur) >= t.limit {
		return t.overflow
	}
	// A label value must be UTF-8 (Prometheus refuses a whole page for one that is not); a subject token
	// is, but the cost of making sure is paid once per type. The key is cloned so that it does not pin a
	// buffer the token points into.
	c := t.vec.WithLabelValues(strings.ToValidUTF8(value, "\uFFFD"))
	next := maps.Clone(cur)
	next[strings.Clone(value)] = c
	t.byValue.Store(&next)
	return c
}
