package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// NewFunc returns a collector of one family whose series are read at scrape time: collect calls emit
// once per series, with the label values in the order of labels. It suits values another part of the
// bridge keeps (a connection's state, readiness) and sets of series known only then. Label values that are
// not UTF-8 are made valid (Prometheus refuses a whole page for one such value); a series emitted with the
// wrong number of values is reported as the scrape's error, and the rest of the page is served.
func NewFunc(name, help string, typ prometheus.ValueType, labels []string,
	collect func(emit func(v float64, values ...string))) prometheus.Collector {
	return &funcCollector{desc: prometheus.NewDesc(name, help, labels, nil), typ: typ, collect: collect}
}

type funcCollector struct {
	desc    *prometheus.Desc
	typ     prometheus.ValueType
	collect func(emit func(float64, ...string))
}

func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *funcCollector) Collect(ch chan<- prometheus.Metric) {
	c.collect(func(v float64, values ...string) {
		for i, s := range values {
			values[i] = strings.ToValidUTF8(s, "\uFFFD")
		}
		m, err := prometheus.NewConstMetric(c.desc, c.typ, v, values...)
		if err != nil {
			m = prometheus.NewInvalidMetric(c.desc, err)
		}
		ch <- m
	})
}

// Bool is a gauge's value of b: 1 when true, 0 when false.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
