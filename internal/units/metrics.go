package units

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
)

// The outcomes of one event taken from the events stream (bridge_units_events_total). Their series are
// created with value 0 at start-up, so that rate() and absent-series alerts work from the first scrape.
const (
	// OutcomeApplied: the event is now its unit's value.
	OutcomeApplied = "applied"
	// OutcomeOlder: the unit's value is this event or a later one, which is kept.
	OutcomeOlder = "older"
	// OutcomeNoUnit: the event names no loading unit (its unit token is "_"); not kept.
	OutcomeNoUnit = "no_unit"
	// OutcomeBadTimestamp: the event's top-level timestamp is missing, not a string or not an RFC 3339
	// time (or its data is not a JSON object); not kept.
	OutcomeBadTimestamp = "bad_timestamp"
	// OutcomeFuture: the event's timestamp lies more than MaxAhead after the time the stream stored it;
	// not kept, or one such event would stay its unit's latest and hide every real one after it.
	OutcomeFuture = "future"
	// OutcomeRetry: the bucket write failed (NATS unreachable, a timeout); the event is handed back and
	// taken again later.
	OutcomeRetry = "retry"
)

var outcomes = [...]string{OutcomeApplied, OutcomeOlder, OutcomeNoUnit, OutcomeBadTimestamp, OutcomeFuture, OutcomeRetry}

// Metrics is the units view's series (docs/operations.md#metrics-reference). Safe for concurrent use. The
// lag gauges are registered with RegisterLag, once the view exists.
type Metrics struct {
	events    map[string]prometheus.Counter
	conflicts prometheus.Counter
}

// NewMetrics returns the units view's counters, registered on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{events: map[string]prometheus.Counter{}}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_units_events_total",
		Help: "Events the units view took from the events stream, by outcome: applied (now the unit's value), " +
			"older (a later event is kept), no_unit, bad_timestamp (not kept), retry (the write failed; taken again later)."},
		[]string{"outcome"})
	for _, o := range outcomes {
		m.events[o] = vec.WithLabelValues(o)
	}
	m.conflicts = prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "_units_write_conflicts_total",
		Help: "Bucket writes of the units view refused because the unit's value changed since it was read " +
			"(another bridge wrote it); the unit is read again and the event decided again."})
	reg.MustRegister(vec, m.conflicts)
	return m
}

func (m *Metrics) outcome(o string) {
	if m != nil {
		m.events[o].Inc()
	}
}

func (m *Metrics) conflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

// RegisterLag registers the view's lag on reg, read from v at scrape time: bridge_units_lag_events, the
// events of the stream the view has not applied yet (its consumer's pending and unacknowledged events), and
// bridge_units_lag_seconds, how long ago the stream stored the newest event this bridge applied, while
// any are left (0 when the view has caught up).
func RegisterLag(reg prometheus.Registerer, v *View) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metrics.Namespace + "_units_lag_events",
			Help: "Events in the events stream the units view has not applied yet (its durable consumer's pending and unacknowledged events)."},
			func() float64 { return float64(v.Status().LagEvents) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metrics.Namespace + "_units_lag_seconds",
			Help: "While the units view has events left to apply: seconds since the events stream stored the newest event this bridge applied; 0 when it has caught up."},
			func() float64 { return v.Status().LagSeconds }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metrics.Namespace + "_units_view_up",
			Help: "1 while the units view is set up and applying events (its bucket and consumer exist, its last write did not fail)."},
			func() float64 { return metrics.Bool(v.Ready() == nil) }),
	)
}
