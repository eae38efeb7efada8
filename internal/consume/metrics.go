package consume

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
)

// The label values of bridge_reports_outcomes_total: the kinds of Observer.Outcome and the classes of
// the upstream's status. Their series are created with value 0 at start-up, so that rate() and
// absent-series alerts work from the first scrape.
var (
	outcomeKinds  = []string{"accepted", "retry", "rejected", "invalid", "expired"}
	statusClasses = []string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}
)

// Metrics is the report consumer's series (docs/operations.md#metrics-reference) and its Observer. Safe
// for concurrent use; a lookup costs no allocation.
type Metrics struct {
	consumed prometheus.Counter
	outcomes map[[2]string]prometheus.Counter // by kind and status class
	outVec   *prometheus.CounterVec
}

var _ Observer = (*Metrics)(nil)

// NewMetrics returns the report consumer's series, registered on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{outcomes: map[[2]string]prometheus.Counter{}}
	m.consumed = prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "_reports_consumed_total",
		Help: "Report deliveries taken from the reports stream, redeliveries included."})
	m.outVec = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_reports_outcomes_total",
		Help: "Settled report deliveries by outcome (accepted, retry, rejected, invalid, expired) and class " +
			"of the upstream's HTTP status (none when it did not answer)."}, []string{"outcome", "status_class"})
	for _, o := range outcomeKinds {
		for _, c := range statusClasses {
			m.outcomes[[2]string{o, c}] = m.outVec.WithLabelValues(o, c)
		}
	}
	reg.MustRegister(m.consumed, m.outVec)
	return m
}

// Consumed implements Observer.
func (m *Metrics) Consumed() { m.consumed.Inc() }

// Outcome implements Observer.
func (m *Metrics) Outcome(kind, statusClass string) {
	c, ok := m.outcomes[[2]string{kind, statusClass}]
	if !ok {
		c = m.outVec.WithLabelValues(kind, statusClass) // a value added to this package: still bounded
	}
	c.Inc()
}

// RegisterPending registers bridge_reports_pending on reg, read with pending (Consumer.Pending) at scrape
// time.
func RegisterPending(reg prometheus.Registerer, pending func() uint64) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metrics.Namespace + "_reports_pending",
		Help: "Reports in the reports stream not yet settled: waiting, in flight, or waiting for a delayed redelivery."},
		func() float64 { return float64(pending()) }))
}
