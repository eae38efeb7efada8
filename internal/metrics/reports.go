package metrics

import (
	"github.com/tracking-bridge/tracking-bridge/internal/consume"
)

// Reports is the report consumer's metrics, its consume.Observer. Its methods are safe for concurrent
// use.
type Reports struct {
	consumed *Counter
	outcomes map[[2]string]*Counter
	outVec   *Vec[Counter]
}

var _ consume.Observer = (*Reports)(nil)

// NewReports returns the report consumer's metrics, registered on reg.
func NewReports(reg *Registry) *Reports {
	m := &Reports{outcomes: map[[2]string]*Counter{}}
	m.consumed = reg.NewCounter(Namespace+"_reports_consumed_total",
		"Report deliveries taken from the reports stream, redeliveries included.")
	m.outVec = reg.NewCounterVec(Namespace+"_reports_outcomes_total",
		"Settled report deliveries by outcome (accepted, retry, rejected, invalid, expired) and class "+
			"of the upstream's HTTP status (none when it did not answer).", []string{"outcome", "status_class"})
	for _, o := range ReportOutcomes {
		for _, c := range StatusClasses {
			m.outcomes[[2]string{o, c}] = m.outVec.With(o, c)
		}
	}
	return m
}

// Consumed implements consume.Observer.
func (m *Reports) Consumed() { m.consumed.Inc() }

// Outcome implements consume.Observer.
func (m *Reports) Outcome(kind, statusClass string) {
	c, ok := m.outcomes[[2]string{kind, statusClass}]
	if !ok {
		c = m.outVec.With(kind, statusClass) // a value added to consume: still bounded
	}
	c.Inc()
}
