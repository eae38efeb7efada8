package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
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

// scrapeCollector reports the values read from Sources at scrape time.
type scrapeCollector struct {
	src atomic.Pointer[Sources]
}

func newScrape(reg prometheus.Registerer) *scrapeCollector {
	c := &scrapeCollector{}
	c.src.Store(&Sources{})
	reg.MustRegister(c)
	return c
}

var (
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
	for _, d := range []*prometheus.Desc{descState, descPending, descNATSUp, descNATSReconnects, descReady, descLeader} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
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
