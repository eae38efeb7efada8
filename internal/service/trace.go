package service

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
)

// A request's span (docs/operations.md#tracing): one server span per request to an endpoint, from its
// receipt to its reply, in OpenTelemetry's RPC conventions (rpc.system=nats, rpc.method the endpoint's
// name). It continues the trace of the request's traceparent header (read with the carrier's bounds), or
// starts one; the upstream call is a client span inside it, and the units endpoints' reads from NATS run
// in its context. A refusal is recorded by its kind and code, never with the request's body or the
// refusal's text, which quotes the caller's values. With Config.Tracer nil nothing here runs.

// Attribute keys of a request's span besides the conventions'.
const (
	// keyRefusal is the kind of a failure answered, one of reply.go's kinds: a sentence in the bridge's
	// own words ("the request is invalid", "the bridge is busy", …), never a caller's byte. A request
	// dropped without an answer (its reply subject not a caller's inbox) makes no span.
	keyRefusal = attribute.Key("bridge.api.refusal")
)

// startSpan starts the span of request r to ep and returns its context: s.base (with the caller's
// remote span context, when r names one) with the span.
func (s *Service) startSpan(ep *endpoint, r *nats.Msg) (context.Context, trace.Span) {
	// Without a traceparent, or with a malformed one, the context is s.base itself: a trace of the
	// request's own.
	subject := s.Subject(ep.Name)
	ctx, span := s.cfg.Tracer.Start(carrier.Extract(s.base, r.Header), subject, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(semconv.RPCSystemNameKey.String("nats"), semconv.RPCMethod(ep.Name),
			semconv.MessagingDestinationName(subject), semconv.MessagingMessageBodySize(len(r.Data)))
	}
	return ctx, span
}

// spanAnswered records the answer res on span and ends it.
func spanAnswered(span trace.Span, res result) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		// The code the bridge answered: the upstream's status on success, Nats-Service-Error-Code on failure.
		span.SetAttributes(semconv.RPCResponseStatusCode(strconv.Itoa(res.code)))
		if res.upstream != 0 {
			span.SetAttributes(tracing.KeyUpstreamStatus.Int(res.upstream))
		}
		if !res.ok {
			span.SetAttributes(keyRefusal.String(string(res.kind)), semconv.ErrorTypeKey.String(strconv.Itoa(res.code)))
			span.SetStatus(codes.Error, string(res.kind))
		}
	}
	span.End()
}
