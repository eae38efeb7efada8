package tracing

import (
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func newTestTracer(s sdktrace.Sampler) trace.Tracer {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(s)).Tracer("test")
}
