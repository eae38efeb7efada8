package metrics

import (
	"strconv"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/publish"
)

// Publish is JetStream publishing's metrics, its publish.Observer. Its methods are safe for concurrent
// use.
type Publish struct {
	publishedBy *Vec[Counter] // by type token, at most MaxTypes of them and OtherType
	ackSeconds  *Histogram
	retries     *Counter
	deadLetters map[string]*Counter
	duplicates  *Counter
	foreign     *Vec[Counter]
}

var _ publish.Observer = (*Publish)(nil)

// NewPublish returns the publishing metrics, registered on reg.
func NewPublish(reg *Registry) *Publish {
	m := &Publish{deadLetters: map[string]*Counter{}}
	m.publishedBy = reg.NewCounterVec(Namespace+"_events_published_total",
		"Events stored in the events stream (JetStream acknowledged), by type subject token; "+
			"types beyond the first "+strconv.Itoa(MaxTypes)+" count as \""+OtherType+"\".", []string{"type"})
	m.publishedBy.Limit(MaxTypes+1, OtherType)
	deadVec := reg.NewCounterVec(Namespace+"_events_dead_lettered_total",
		"Upstream events sent to P.dlq.events instead of P.events.*, by reason: not_json, oversize, max_payload, max_msg_size.",
		[]string{"reason"})
	for _, r := range DeadLetterReasons {
		m.deadLetters[r] = deadVec.With(r)
	}
	m.ackSeconds = reg.NewHistogram(Namespace+"_publish_ack_seconds",
		"Time from publishing an event to its JetStream acknowledgement.",
		ExponentialBuckets(0.0005, 2, 15)) // 0.5 ms … 8 s
	m.retries = reg.NewCounter(Namespace+"_publish_retries_total",
		"Publishes sent again after a failed or unacknowledged attempt.")
	m.duplicates = reg.NewCounter(Namespace+"_events_duplicates_total",
		"Events found stored before and not stored again: acknowledged by JetStream as duplicates (an "+
			"event with the same Nats-Msg-Id was stored within the duplicate window), or skipped by the bridge "+
			"as stored beyond its resume point when the upstream replays them after a restart or reconnect.")
	m.foreign = reg.NewCounterVec(Namespace+"_foreign_writes_total",
		"Times the bridge found and wrote over what another client than a bridge wrote where only bridges "+
			"write: the lease key (target lease), a fence subject or the restart subject (target fence); many "+
			"messages piled up on one subject count once. In a NATS account shared with clients, JetStream "+
			"stores its acknowledgement of a client's publish on the reply subject the client chose.",
		[]string{"target"})
	m.foreign.With("lease")
	m.foreign.With("fence")
	return m
}

// ForeignFenceWrite implements publish.Observer.
func (m *Publish) ForeignFenceWrite() { m.foreign.With("fence").Inc() }

// ForeignLeaseWrite counts a foreign value found in the lease key (lease.Config.OnForeignWrite).
func (m *Publish) ForeignLeaseWrite() { m.foreign.With("lease").Inc() }

// Published implements publish.Observer: the event was stored; typeToken is its subject's last token.
func (m *Publish) Published(typeToken string) { m.publishedBy.With(typeToken).Inc() }

// Duplicate implements publish.Observer: the event was stored before and is not stored again.
func (m *Publish) Duplicate(string) { m.duplicates.Inc() }

// Duplicates returns how many events were found stored before since start-up (see Duplicate).
func (m *Publish) Duplicates() uint64 { return m.duplicates.Value() }

// AckLatency implements publish.Observer.
func (m *Publish) AckLatency(d time.Duration) { m.ackSeconds.Observe(d.Seconds()) }

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
