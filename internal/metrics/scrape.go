package metrics

import (
	"sync/atomic"

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
	// HTTPConnsShed is the number of connections the HTTP endpoint closed to make room for a new one.
	HTTPConnsShed func() uint64
}

// scrapeSources holds the Sources and registers the metrics read from them at scrape time.
type scrapeSources struct {
	src atomic.Pointer[Sources]
}

func newScrape(reg *Registry) *scrapeSources {
	c := &scrapeSources{}
	c.src.Store(&Sources{})
	bit := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	reg.Func(Namespace+"_stream_state",
		"1 for the event stream's current state: starting, connected, reconnecting, unavailable (403/404) or stopped.",
		TypeGauge, []string{"state"}, func(emit func(float64, ...string)) {
			if f := c.src.Load().StreamState; f != nil {
				cur := f()
				for _, st := range StreamStates {
					emit(bit(st == cur), st.String())
				}
			}
		})
	reg.Func(Namespace+"_reports_pending",
		"Reports in the reports stream not yet settled: waiting, in flight, or waiting for a delayed redelivery.",
		TypeGauge, nil, func(emit func(float64, ...string)) {
			if f := c.src.Load().ReportsPending; f != nil {
				emit(float64(f()))
			}
		})
	reg.Func(Namespace+"_nats_connected", "1 while the NATS connection is up.", TypeGauge, nil,
		func(emit func(float64, ...string)) {
			if f := c.src.Load().NATSConnected; f != nil {
				emit(bit(f()))
			}
		})
	reg.Func(Namespace+"_nats_reconnects_total", "NATS reconnections since start-up.", TypeCounter, nil,
		func(emit func(float64, ...string)) {
			if f := c.src.Load().NATSReconnects; f != nil {
				emit(float64(f()))
			}
		})
	reg.Func(Namespace+"_leader",
		"1 while this bridge holds the lease and reads the upstream stream, 0 on a standby.", TypeGauge, nil,
		func(emit func(float64, ...string)) {
			if f := c.src.Load().Leader; f != nil {
				emit(bit(f()))
			}
		})
	reg.Func(Namespace+"_http_connections_shed_total",
		"Connections to the HTTP endpoint closed to make room for a new one (BRIDGE_HTTP_MAX_CONNS were open).",
		TypeCounter, nil, func(emit func(float64, ...string)) {
			if f := c.src.Load().HTTPConnsShed; f != nil {
				emit(float64(f()))
			}
		})
	reg.Func(Namespace+"_ready", "1 when the readiness check passes (the same checks as /readyz).",
		TypeGauge, []string{"check"}, func(emit func(float64, ...string)) {
			if f := c.src.Load().Readiness; f != nil {
				for name, ok := range f() {
					emit(bit(ok), name)
				}
			}
		})
	return c
}
