package metrics

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/publish"
)

// Publish is JetStream publishing's metrics, its publish.Observer. Its methods are safe for concurrent
// use.
type Publish struct {
	typesMu     sync.Mutex
	types       map[string]prometheus.Counter
	publishedBy *prometheus.CounterVec
	other       prometheus.Counter
	ackSeconds  prometheus.Histogram
	retries     prometheus.Counter
	deadLetters map[string]prometheus.Counter
	duplicates  prometheus.Counter
	dupCount    atomic.Uint64 // duplicates, for the status page
}

var _ publish.Observer = (*Publish)(nil)

// NewPublish returns the publishing metrics, registered on reg.
func NewPublish(reg prometheus.Registerer) *Publish {
	m := &Publish{types: map[string]prometheus.Counter{}, deadLetters: map[string]prometheus.Counter{}}
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
	reg.MustRegister(m.publishedBy, deadVec, m.ackSeconds, m.retries, m.duplicates)
	return m
}

// Published implements publish.Observer: the event was stored; typeToken is its subject's last token.
func (m *Publish) Published(typeToken string) { m.typeCounter(typeToken).Inc() }

// Duplicate implements publish.Observer: the event was stored before and is not stored again.
func (m *Publish) Duplicate(string) {
	m.duplicates.Inc()
	m.dupCount.Add(1)
}

// Duplicates returns how many events were found stored before since start-up (see Duplicate).
func (m *Publish) Duplicates() uint64 { return m.dupCount.Load() }

// AckLatency implements publish.Observer.
func (m *Publish) AckLatency(d time.Duration) { m.ackSeconds.Observe(d.Seconds()) }

// typeCounter returns the counter of a type token, creating it for the first MaxTypes tokens.
func (m *Publish) typeCounter(token string) prometheus.Counter {
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
func (m *Publish) DeadLettered(reason string) {
	c, ok := m.deadLetters[reason]
	if !ok {
		c = m.deadLetters["other"]
	}
	c.Inc()
}

// PublishRetried implements publish.Observer.
func (m *Publish) PublishRetried(error) { m.retries.Inc() }
