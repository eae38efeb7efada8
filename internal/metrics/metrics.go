// Package metrics is what the bridge's Prometheus metrics share: the registry that /metrics serves, with
// the Go runtime's and the process's collectors (NewRegistry); the handler that serves it, in the text
// format or, when the scraper asks for it, in OpenMetrics, which carries exemplars (Handler); a family read
// at scrape time (NewFunc); and the rendering of an HTTP status as a label value (StatusCode).
//
// The series themselves are the components': each declares its own, in a metrics.go of its package, on
// the prometheus.Registerer the daemon hands it (upstream's stream and HTTP clients, publish, consume,
// service, and the daemon's own parts). This package imports none of them. Every name starts with
// Namespace and every label has a small, bounded set of values (docs/operations.md#metrics-reference).
package metrics

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace starts every name of the bridge's own series.
const Namespace = "bridge"

// NewRegistry returns the registry /metrics serves, holding the Go runtime's (go_*) and the process's
// (process_*) collectors as the client library ships them.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves g's families on GET. A scraper that asks for OpenMetrics (Prometheus does, in its Accept
// header) gets it, exemplars included; any other client gets the text format 0.0.4. A collector that fails
// is logged to log and left out; the rest of the page is still served.
func Handler(g prometheus.Gatherer, log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		ErrorHandling:     promhttp.ContinueOnError,
		ErrorLog:          errorLog{log},
	})
}

// errorLog hands the handler's errors (a collector that failed, a page cut short) to slog.
type errorLog struct{ log *slog.Logger }

func (l errorLog) Println(v ...any) {
	l.log.Warn("serving /metrics", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}
