package consume

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
)

// A report's span (docs/operations.md#tracing): one consumer span per delivery of a report, from its
// check to its settling, in OpenTelemetry's messaging conventions. It continues the trace of the report's
// traceparent header (read with the carrier's bounds), or starts one when the report carries none; the
// upstream POST is a client span inside it. With Config.Tracer nil nothing here runs.

// Span events of a report's span: how it was settled.
const (
	spanAcknowledged = "acknowledged"  // the upstream accepted it; acknowledged
	spanRedelivery   = "redelivery"    // handed back for a delayed redelivery
	spanHandedBack   = "handed_back"   // handed back at a stop cut short
	spanDeadLettered = "dead_lettered" // stored on P.dlq.reports, then acknowledged
)

// Attribute keys of a report's span besides the conventions'.
const (
	// keyDeliveryCount is the delivery's number: 1 the first time, more on redeliveries.
	keyDeliveryCount = attribute.Key("messaging.nats.delivery_count")
	// keyOutcome is how the report was settled: accepted, retry, rejected, invalid, expired, handed_back.
	keyOutcome = attribute.Key("bridge.report.outcome")
	// keyRetryDelay is the delay of a redelivery, in seconds.
	keyRetryDelay = attribute.Key("bridge.report.retry_delay_s")
)

// maxIDAttr bounds the Nats-Msg-Id on a span: it is the producer's value, which JetStream does not bound,
// so the span carries it through logging.Value, cut to this many bytes without control or invisible
// characters.
const maxIDAttr = 128

// startSpan starts the span of one delivery of msg, continuing the trace its headers name, and returns
// the context the upstream attempt runs in: parent (the consumer's abort context) with the span.
func (c *Consumer) startSpan(parent context.Context, msg jetstream.Msg, meta *jetstream.MsgMetadata) (context.Context, trace.Span) {
	// Without a traceparent, or with a malformed one, the context is parent itself: a trace of the
	// report's own.
	ctx, span := c.cfg.Tracer.Start(carrier.Extract(parent, msg.Headers()), "process "+c.cfg.Subject, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		body := msg.Data()
		span.SetAttributes(tracing.MessagingNATS, semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"), semconv.MessagingDestinationName(msg.Subject()),
			semconv.MessagingConsumerGroupName(c.cfg.Durable), semconv.MessagingMessageBodySize(len(body)),
			keyDeliveryCount.Int64(int64(min(meta.NumDelivered, 1<<62))),
			tracing.KeyStreamSequence.Int64(int64(min(meta.Sequence.Stream, 1<<62))))
		if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
			span.SetAttributes(semconv.MessagingMessageID(logging.Value(id, maxIDAttr)))
		}
	}
	return ctx, span
}

// spanSettled records how a report was settled on its span; status is the upstream's HTTP status (0:
// it did not answer, or was not asked). A dead letter's span has status error, with its kind as
// the message: never the reason's text, which may quote the report.
func spanSettled(span trace.Span, event, outcome string, status int, delay time.Duration) {
	if span == nil || !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{keyOutcome.String(outcome)}
	if status > 0 {
		attrs = append(attrs, tracing.KeyUpstreamStatus.Int(status))
	}
	if event == spanRedelivery {
		attrs = append(attrs, keyRetryDelay.Float64(delay.Seconds()))
	}
	span.AddEvent(event) // the outcome's attributes go on the span, where a query finds them
	span.SetAttributes(attrs...)
	if event == spanDeadLettered {
		msg := "dead-lettered: " + outcome
		if status > 0 {
			msg += " (upstream HTTP " + strconv.Itoa(status) + ")"
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(outcome))
		span.SetStatus(codes.Error, msg)
	}
}
