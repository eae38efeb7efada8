package daemon

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/units"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// parts' metrics: each component's series, declared in its own package on the daemon's registry and
// handed to that component only.
type partMetrics struct {
	stream   *upstream.StreamMetrics // the event stream's observer
	upstream *upstream.ClientMetrics // the upstream HTTP clients' and the token source's
	publish  *publish.Metrics        // every term's publisher's observer, and the lease's foreign writes
	reports  *consume.Metrics        // the report consumer's observer
	api      *service.Metrics        // the API service's observer
	units    *units.Metrics          // the units view's counters
}

func newPartMetrics(reg prometheus.Registerer) partMetrics {
	return partMetrics{
		stream:   upstream.NewStreamMetrics(reg),
		upstream: upstream.NewClientMetrics(reg),
		publish:  publish.NewMetrics(reg),
		reports:  consume.NewMetrics(reg),
		api:      service.NewMetrics(reg),
		units:    units.NewMetrics(reg),
	}
}

// registerMetrics registers the series read from d's parts at scrape time: the stream's state and the
// report backlog (declared by their packages), and the daemon's own: the build, the NATS connection,
// leadership, readiness and the HTTP endpoint's shed connections. d's parts must exist.
func (d *Daemon) registerMetrics(reg prometheus.Registerer) {
	upstream.RegisterStreamState(reg, d.events.StreamState)
	consume.RegisterPending(reg, d.reports.Pending)
	if d.units != nil {
		units.RegisterLag(reg, d.units.View)
	}
	o := d.ops
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metrics.Namespace + "_build_info",
			Help:        "Always 1; the labels name the bridge's version, commit and Go version.",
			ConstLabels: prometheus.Labels{"version": d.info.Version, "commit": d.info.Commit, "go_version": runtime.Version()}},
			func() float64 { return 1 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metrics.Namespace + "_nats_connected",
			Help: "1 while the NATS connection is up."},
			func() float64 { return metrics.Bool(d.natsSt.Connected()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: metrics.Namespace + "_nats_reconnects_total",
			Help: "NATS reconnections since start-up."},
			func() float64 { return float64(d.natsSt.Reconnects()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metrics.Namespace + "_leader",
			Help: "1 while this bridge holds the lease and reads the upstream stream, 0 on a standby."},
			func() float64 { return metrics.Bool(d.events.Leading()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: metrics.Namespace + "_http_connections_shed_total",
			Help: "Connections to the HTTP endpoint closed to make room for a new one (BRIDGE_HTTP_MAX_CONNS were open)."},
			func() float64 { return float64(o.connsShed()) }),
		metrics.NewFunc(metrics.Namespace+"_ready", "1 when the readiness check passes (the same checks as /readyz).",
			prometheus.GaugeValue, []string{"check"}, func(emit func(float64, ...string)) {
				for name, ok := range o.readiness() {
					emit(metrics.Bool(ok), name)
				}
			}),
	)
}
