package publish

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
)

// An event's span (docs/operations.md#tracing): one producer span from the moment Handle takes the SSE
// message to JetStream's acknowledgement of its message, in OpenTelemetry's messaging conventions. Its
// context travels on the message as traceparent, the same on every send of it (no tracestate: the span
// starts a trace of its own, and a sampler hands on only a parent's). With
// Config.Spans nil nothing here runs.

// Span events of an event's span.
const (
	spanDuplicate    = "duplicate"     // JetStream acknowledged the message as a duplicate: stored before
	spanDeadLettered = "dead_lettered" // the event went to P.dlq.events
	spanFenced       = "fenced"        // JetStream refused the message by the leader's fence
	spanFoundStored  = "found_stored"  // a failed publish found stored after all
	spanRetry        = "retry"         // the message is sent again
	spanAbandoned    = "abandoned"     // the publisher closed before JetStream's acknowledgement came
)

// startSpan starts the span of an event as Handle takes it, a "send" producer span (Config.Spans). The
// event's span starts a trace of its own (a connection lasts hours and carries millions of events), and
// when it is sampled it links to the span in ctx, the stream's connection's
// (upstream.StreamConfig.Tracer). A span that is not sampled is a no-op span beside its span context
// (tracing.Roots): ctx is not looked into.
func (p *Publisher) startSpan(ctx context.Context) (trace.Span, trace.SpanContext) {
	span, sc := p.cfg.Spans.Start()
	if span.IsRecording() {
		span.AddLink(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)})
	}
	return span, sc
}

// traceEntry gives entry e the event's span and the context its message carries.
func traceEntry(e *pending, span trace.Span, sc trace.SpanContext) {
	e.span = span
	e.tp = carrier.Format(sc)
}

// endUnsent ends the span of an event that is not sent: found stored beyond the resume point, or
// Handle stopped (err) before it could take it.
func endUnsent(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.AddEvent(spanFoundStored)
	}
	span.End()
}

// describeSpan names the span after its message, once built: "send P.events.{type}.{unit}" for an
// event, "send P.dlq.events" for a dead letter, with the message's attributes. Nothing in it comes from
// the event's data but its id, type token and size.
func (p *Publisher) describeSpan(e *pending) {
	if !e.span.IsRecording() {
		return // not sampled: nothing is recorded, and attributes would be copied for nothing
	}
	e.span.SetAttributes(tracing.MessagingNATS, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send"))
	if e.dead != nil {
		e.span.SetName("send " + p.msgs.dlq)
		e.span.SetAttributes(semconv.MessagingDestinationName(p.msgs.dlq), semconv.MessagingMessageID(e.id),
			semconv.MessagingMessageBodySize(len(e.dead.Data)))
		return
	}
	if p.cfg.Reported != nil {
		p.linkReported(e)
	}
	template := p.msgs.events + "{type}.{unit}"
	e.span.SetName("send " + template)
	e.span.SetAttributes(semconv.MessagingDestinationName(e.subject), semconv.MessagingDestinationTemplate(template),
		semconv.MessagingMessageID(e.id), semconv.MessagingMessageBodySize(len(e.data)), tracing.KeyEventType.String(e.token))
}

// deadLetterSpan records on the span that the event was dead-lettered, and why.
func deadLetterSpan(e *pending, code, reason string) {
	if e.span == nil || !e.span.IsRecording() {
		return
	}
	e.span.AddEvent(spanDeadLettered, trace.WithAttributes(attribute.String("reason", code)))
	e.span.SetStatus(codes.Error, reason)
}

// spanEvent adds the event name to the entry's span.
func spanEvent(e *pending, name string) {
	if e.span != nil {
		e.span.AddEvent(name)
	}
}

// endAbandoned ends the span of a message still unacknowledged when the publisher closed (its term
// ended): whether it was stored, the next leader finds out, which the span cannot say.
func endAbandoned(span trace.Span) {
	span.AddEvent(spanAbandoned)
	span.End()
}

// endStored ends the span of a message JetStream stored: seq is its stream sequence (0 when unknown,
// as for a message found stored rather than acknowledged), duplicate whether JetStream said it was
// stored before.
func endStored(span trace.Span, seq uint64, duplicate bool) {
	if span.IsRecording() {
		if seq > 0 {
			span.SetAttributes(tracing.KeyStreamSequence.Int64(int64(seq)))
		}
		if duplicate {
			span.AddEvent(spanDuplicate)
		}
	}
	span.End()
}

// traceID returns the trace id of a sampled span, for an exemplar; the zero id otherwise.
func traceID(span trace.Span) trace.TraceID {
	if span == nil {
		return trace.TraceID{}
	}
	if sc := span.SpanContext(); sc.IsSampled() {
		return sc.TraceID()
	}
	return trace.TraceID{}
}
