// Package tracing is the bridge's one owner of OpenTelemetry: it builds the tracer provider from
// config.Tracing (the standard OTEL_* variables), exports the spans over OTLP/HTTP in batches through a
// bounded queue (exporter.go, with its own protobuf encoding in otlp.go), counts the spans it drops, and
// names the attributes the components' spans share. Roots
// starts the events' spans, one a trace, asking the sampler before the SDK. Its subpackage carrier carries
// the trace context in NATS headers.
//
// With tracing off, New returns a Provider whose Tracer is nil: the components then skip every step of
// their spans, so that the event path does nothing more per event than without tracing. With tracing on,
// a collector that is down or slow never holds up the bridge: a span ends into a bounded queue, and when
// the queue is full the span is dropped and counted (bridge_trace_spans_dropped_total), never waited for.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
)

// Queue bounds. The queue holds the spans ended and not yet handed to the exporter; QueueSize is the
// OpenTelemetry specification's default for a batch span processor, about a second of events at
// 2,000 events/s with their token and stream spans besides.
const (
	QueueSize  = 2048
	BatchSize  = 512
	BatchDelay = time.Second // the longest a span waits in the queue before an export starts
)

// Reasons of bridge_trace_spans_dropped_total.
const (
	DropQueueFull    = "queue_full"    // ended while the queue was full: the exporter is slower than the bridge
	DropExportFailed = "export_failed" // in an export the collector refused or did not answer
)

// Provider holds the bridge's tracer provider. The zero Provider, and one from New with tracing off, has
// a nil Tracer. Safe for concurrent use.
type Provider struct {
	tp       *sdktrace.TracerProvider
	sampler  sdktrace.Sampler
	dropped  *prometheus.CounterVec
	exported prometheus.Counter
}

// New builds the provider of cfg and registers its series on reg: the spans exported and dropped (both
// zero with tracing off). version is the service.version of the spans' resource. It contacts nothing:
// the exporter connects on its first export.
func New(ctx context.Context, cfg config.Tracing, reg prometheus.Registerer, log *slog.Logger, version string) (*Provider, error) {
	p := &Provider{
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "_trace_spans_dropped_total",
			Help: "Spans not exported, by reason: queue_full (ended while the export queue was full), " +
				"export_failed (in an export the collector refused, rejected in part or did not answer)."}, []string{"reason"}),
		exported: prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "_trace_spans_exported_total",
			Help: "Spans the OTLP collector accepted."}),
	}
	p.dropped.WithLabelValues(DropQueueFull)
	p.dropped.WithLabelValues(DropExportFailed)
	if reg != nil {
		if err := reg.Register(p.dropped); err != nil {
			return nil, err
		}
		if err := reg.Register(p.exported); err != nil {
			return nil, err
		}
	}
	if !cfg.Enabled {
		return p, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The SDK reports a failed export through the global error handler; the bridge logs it, at most
	// once a minute (a collector that is down fails every export).
	otel.SetErrorHandler(errorLog{log: log, limit: logging.NewLimiter(time.Minute, nil)})

	exp, err := newExporter(cfg, version)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	res, err = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(cfg.ServiceName),
		semconv.ServiceVersion(version)))
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	q := &queued{}
	counted := &countingExporter{SpanExporter: exp, queued: q, failed: p.dropped.WithLabelValues(DropExportFailed),
		exported: p.exported}
	bsp := sdktrace.NewBatchSpanProcessor(counted,
		sdktrace.WithMaxQueueSize(QueueSize), sdktrace.WithMaxExportBatchSize(BatchSize),
		sdktrace.WithBatchTimeout(BatchDelay), sdktrace.WithExportTimeout(cfg.Timeout))
	p.sampler = Sampler(cfg.Sampler, cfg.Ratio)
	p.tp = sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(p.sampler),
		sdktrace.WithIDGenerator(IDs{}),
		sdktrace.WithSpanProcessor(&boundedProcessor{SpanProcessor: bsp, queued: q,
			dropped: p.dropped.WithLabelValues(DropQueueFull)}),
	)
	return p, nil
}

// Sampler returns the sampler OTEL_TRACES_SAMPLER names (config.Tracing's spelling) with its ratio.
func Sampler(name string, ratio float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// Enabled reports whether spans are recorded and exported.
func (p *Provider) Enabled() bool { return p != nil && p.tp != nil }

// Tracer returns the tracer of the instrumentation scope name (the component's package path), nil
// when tracing is off.
func (p *Provider) Tracer(name string) trace.Tracer {
	if !p.Enabled() {
		return nil
	}
	return p.tp.Tracer(name)
}

// Shutdown exports the spans still queued and stops the exporter, within ctx (the daemon's stop
// bound): spans still queued when ctx ends are lost.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing shutdown: %w", err)
	}
	return nil
}

// queued counts the spans handed to the batch processor and not yet to the exporter: those in its queue
// and in the batch it is filling.
type queued struct{ n atomic.Int64 }

// boundedProcessor keeps the batch processor's queue from filling: a span that would find it full is
// dropped here and counted. The SDK's batch processor drops such a span too, but keeps its count to
// itself; this bound is the same as its queue's, so its own never drops.
type boundedProcessor struct {
	sdktrace.SpanProcessor
	queued  *queued
	dropped prometheus.Counter
}

func (b *boundedProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return // not exported: the batch processor ignores it too
	}
	if b.queued.n.Add(1) > QueueSize {
		b.queued.n.Add(-1)
		b.dropped.Inc()
		return
	}
	b.SpanProcessor.OnEnd(s)
}

// countingExporter counts the spans the collector accepted and those it did not.
type countingExporter struct {
	sdktrace.SpanExporter
	queued           *queued
	failed, exported prometheus.Counter
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.queued.n.Add(-int64(len(spans)))
	err := e.SpanExporter.ExportSpans(ctx, spans)
	failed := int64(len(spans))
	var partial *PartialSuccess
	switch {
	case err == nil:
		failed = 0
	case errors.As(err, &partial): // the collector kept the others
		failed = min(partial.Rejected, failed)
	}
	e.failed.Add(float64(failed))
	e.exported.Add(float64(int64(len(spans)) - failed))
	return err
}

// errorLog hands the SDK's errors to the bridge's log.
type errorLog struct {
	log   *slog.Logger
	limit *logging.Limiter
}

func (l errorLog) Handle(err error) {
	if ok, suppressed := l.limit.Allow("export"); ok {
		l.log.Warn("tracing: spans not exported", "err", logging.Value(err.Error(), 512), "suppressed", suppressed)
	}
}

// Attributes the components' spans share.
var (
	// MessagingNATS is messaging.system of every messaging span.
	MessagingNATS = semconv.MessagingSystemKey.String("nats")
)

// Attribute keys of the bridge's own, beside the semantic conventions'.
const (
	// KeyStreamSequence is the event's sequence in the events stream, from JetStream's acknowledgement.
	KeyStreamSequence = attribute.Key("messaging.nats.stream.sequence")
	// KeyRetries is how many times a publish was sent again before JetStream stored it.
	KeyRetries = attribute.Key("bridge.publish.retries")
	// KeyEventType is the event's type subject token.
	KeyEventType = attribute.Key("bridge.event.type")
	// KeyUpstreamStatus is the upstream's HTTP status on a report's or an API request's span, when it
	// answered.
	KeyUpstreamStatus = attribute.Key("bridge.upstream.status_code")
)
