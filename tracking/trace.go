package tracking

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
)

// Trace context headers: with tracing on, the bridge puts the W3C trace context of its span for an
// event on the event's message, under these lower-case names (NATS header names are case-sensitive:
// nats.Header.Set would write "Traceparent"). The other way, Client's calls and Reporter's reports carry
// the trace context of their ctx's span, when it has one, under the same names: the bridge's span for the
// request or the report continues the caller's trace, and so does its request to the provider.
const (
	HeaderTraceparent = carrier.Traceparent
	HeaderTracestate  = carrier.Tracestate
)

// ContinueTrace returns ctx continuing the trace whose context the headers h carry (a *nats.Msg's
// Header, a jetstream.Msg's Headers()): a span a consumer starts from the returned context with its
// OpenTelemetry tracer is a child of the bridge's span for the event, so that a tracing UI shows the
// event from the upstream's stream to the consumer. Without a valid traceparent it returns ctx
// unchanged. What a publisher put in the headers is bounded: a malformed or oversized traceparent is
// ignored, an oversized tracestate is cut as W3C Trace Context allows. EventConsumer.Consume hands
// its handler such a context already.
func ContinueTrace(ctx context.Context, h nats.Header) context.Context {
	return carrier.Extract(ctx, h)
}
