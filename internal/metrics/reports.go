package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/consume"
)

// Reports is the report consumer's metrics, its consume.Observer. Its methods are safe for concurrent
// use.
type Reports struct {
	consumed prometheus.Counter
	outcomes map[[2]string]prometheus.Counter
	outVec   *prometheus.CounterVec
}

var _ consume.Observer = (*Reports)(nil)

// NewReports returns the report consumer's metrics, registered on reg.
func NewReports(reg prometheus.Registerer) *Reports {
	m := &Reports{outcomes: map[[2]string]prometheus.Counter{}}
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
	reg.MustRegister(m.consumed, m.outVec)
	return m
}

// Consumed implements consume.Observer.
func (m *Reports) Consumed() { m.consumed.Inc() }

// Outcome implements consume.Observer.
func (m *Reports) Outcome(kind, statusClass string) {
	c, ok := m.outcomes[[2]string{kind, statusClass}]
	if !ok {
		c = m.outVec.WithLabelValues(kind, statusClass) // a value added to consume: still bounded
	}
	c.Inc()
}
