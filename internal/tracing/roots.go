package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Roots starts spans of one name and kind that each begin a trace of their own, many times a second: the
// events' spans. It draws the trace id and asks the provider's sampler itself, before the SDK: a span the
// sampler drops is then only its span context (the traceparent a message carries), with no SDK span,
// context or option made for it; a span the sampler keeps is started by the SDK on the same trace id (the
// provider's IDs hand it on), whose sampler therefore decides the same.
//
// Measured, because it takes over a step of the SDK's: with the SDK's Start of every event's span the
// bridge at ratio 0.01 cost 1.068x and 1.089x the CPU per event of tracing off, against a target of
// 1.05x; with Roots 1.037x and 1.042x in the same runs (docs/performance.md#tracing). A root dropped here
// allocates nothing; the SDK's Start of one made two allocations (148 B).
type Roots struct {
	tracer  trace.Tracer
	sampler sdktrace.Sampler
	name    string
	kind    trace.SpanKind
	opts    []trace.SpanStartOption
}

// NewRoots returns the Roots of spans name of kind, from tracer, sampled by sampler. The tracer's provider
// must draw its ids with IDs (Provider's does) and sample with sampler, or a span kept here may be
// sampled anew under another trace id.
func NewRoots(tracer trace.Tracer, sampler sdktrace.Sampler, name string, kind trace.SpanKind) *Roots {
	return &Roots{tracer: tracer, sampler: sampler, name: name, kind: kind,
		opts: []trace.SpanStartOption{trace.WithSpanKind(kind)}}
}

// Roots returns the Roots of spans name of kind in the instrumentation scope (the component's package
// path), nil when tracing is off.
func (p *Provider) Roots(scope, name string, kind trace.SpanKind) *Roots {
	if !p.Enabled() {
		return nil
	}
	return NewRoots(p.tp.Tracer(scope), p.sampler, name, kind)
}

// Start starts a span as the root of a new trace. A span the sampler dropped is a no-op span; sc is the
// span's context either way, the one its traceparent carries.
func (r *Roots) Start() (span trace.Span, sc trace.SpanContext) {
	tid, sid := newIDs()
	res := r.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid,
		Name: r.name, Kind: r.kind})
	if res.Decision == sdktrace.Drop {
		return noop.Span{}, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
			TraceState: res.Tracestate})
	}
	_, span = r.tracer.Start(context.WithValue(context.Background(), presetTraceID{}, tid), r.name, r.opts...)
	return span, span.SpanContext()
}

// presetTraceID is the context key of the trace id Roots.Start drew for a span it hands to the SDK.
type presetTraceID struct{}

// IDs is the provider's id generator: the SDK's (random, never zero) but for a trace id Roots drew, which
// it hands on.
type IDs struct{}

var _ sdktrace.IDGenerator = IDs{}

// NewIDs implements sdktrace.IDGenerator.
func (IDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if tid, ok := ctx.Value(presetTraceID{}).(trace.TraceID); ok && tid.IsValid() {
		return tid, newSpanID()
	}
	return newIDs()
}

// NewSpanID implements sdktrace.IDGenerator.
func (IDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

// newIDs draws a trace id and a span id, neither zero, as the SDK's generator does.
func newIDs() (tid trace.TraceID, sid trace.SpanID) {
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

func newSpanID() (sid trace.SpanID) {
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
