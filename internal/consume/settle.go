package consume

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
	"github.com/tracking-bridge/tracking-bridge/internal/validate"
)

// handle validates and sends one report, calls sent when that is over (the upstream answered, or the report
// failed validation or had a malformed header block), then settles it.
func (c *Consumer) handle(msg jetstream.Msg, probe bool, sent func()) {
	c.stats.consumed.Add(1)
	c.stats.inFlight.Add(1)
	defer c.stats.inFlight.Add(-1)
	if c.cfg.Observer != nil {
		c.cfg.Observer.Consumed()
	}
	meta, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery; cannot happen on a pull consumer.
		sent()
		c.circ.abandon(probe)
		c.log.Error("report without JetStream metadata; leaving it to redelivery", "subject", msg.Subject(), "err", err)
		return
	}
	if c.aborted.Err() != nil {
		sent()
		c.circ.abandon(probe)
		c.handBack(msg, meta, nil)
		return
	}
	attempt := c.aborted // the context of the upstream attempt: with the report's span when tracing
	var span trace.Span
	if c.cfg.Tracer != nil {
		attempt, span = c.startSpan(c.aborted, msg, meta)
		defer span.End()
	}
	body := msg.Data()
	if hdr, reason, ok := c.malformedHeader(msg, meta); ok {
		sent()
		c.circ.abandon(probe)
		if problems := validate.Report(body, c.cfg.MaxBytes); problems != nil {
			reason += "; " + strings.Join(problems, "; ")
		}
		c.deadLetter(recoveredHeaders{Msg: msg, hdr: hdr}, meta, "invalid", 0, reason, span)
		return
	}
	if problems := check(msg, body, c.cfg.MaxBytes); problems != nil {
		sent()
		c.circ.abandon(probe)
		c.deadLetter(msg, meta, "invalid", 0, strings.Join(problems, "; "), span)
		return
	}

	// The attempt is not cancelled when Run's context ends: a report being sent is finished and settled.
	// Only a stop cut short at StopTimeout cancels it.
	if span != nil && c.cfg.Sending != nil && span.SpanContext().IsSampled() {
		c.cfg.Sending(body, span.SpanContext())
	}
	sctx, cancel := context.WithTimeout(attempt, c.attemptTimeout)
	out := c.send.Send(sctx, body, idempotencyKey(msg, meta))
	cancel()
	sent()

	if out.Kind == upstream.Retry && c.aborted.Err() != nil {
		c.circ.abandon(probe) // cut short: says nothing about the upstream
		c.handBack(msg, meta, span)
		return
	}
	switch out.Kind {
	case upstream.Accepted:
		c.answered(probe)
		c.stats.accepted.Add(1)
		c.observe(span, "accepted", out.Status, 0)
		c.ack(msg)
	case upstream.Reject:
		c.answered(probe)
		c.deadLetter(msg, meta, "rejected", out.Status, out.Reason(), span)
	default:
		c.failed(probe, out)
		c.retryLater(msg, meta, out, span)
	}
}

// check returns every problem of a report: its body's (validate.Report), and a Nats-Msg-Id that is not
// valid UTF-8. Such an id is a producer's fault to be told of, like an id in the body that is not: it
// would not be sent upstream as the Idempotency-Key (only printable ASCII is), but quietly replacing it
// would hide the fault.
func check(msg jetstream.Msg, body []byte, maxBytes int) []string {
	problems := validate.Report(body, maxBytes)
	if id := msg.Headers().Get(jetstream.MsgIDHeader); !utf8.ValidString(id) {
		problems = append([]string{"the Nats-Msg-Id header is not valid UTF-8"}, problems...)
	}
	return problems
}

// answered records that the upstream answered (accepted or rejected): it is up.
func (c *Consumer) answered(probe bool) {
	if recovered, openFor, failed := c.circ.success(probe); recovered {
		c.log.Info("upstream recovered", "failed_attempts", failed, "after", openFor.Round(time.Millisecond).String())
	}
}

// failed records a transient failure of the upstream.
func (c *Consumer) failed(probe bool, out upstream.Outcome) {
	opened, hold := c.circ.failure(probe, out.RetryAfter)
	if opened {
		c.stats.holds.Add(1)
		c.log.Warn("upstream failing, backing off", "status", out.Status, "err", out.Reason(),
			"hold", hold.Round(time.Millisecond).String())
	}
}

// retryLater hands a report back for a delayed redelivery, or dead-letters it once it is older than MaxAge.
// span is the report's span, nil with tracing off.
func (c *Consumer) retryLater(msg jetstream.Msg, meta *jetstream.MsgMetadata, out upstream.Outcome, span trace.Span) {
	age := time.Since(meta.Timestamp)
	if c.cfg.MaxAge > 0 && age >= c.cfg.MaxAge {
		c.deadLetter(msg, meta, "expired", out.Status, fmt.Sprintf(
			"the upstream still failed after %s (max age %s, %d attempts): %s",
			age.Round(time.Second), c.cfg.MaxAge, meta.NumDelivered, out.Reason()), span)
		return
	}
	delay := max(c.backoff(meta), out.RetryAfter)
	if c.cfg.MaxAge > 0 {
		delay = min(delay, c.cfg.MaxAge-age) // a last attempt right at the age limit
	}
	c.stats.retried.Add(1)
	c.observe(span, "retry", out.Status, delay)
	c.log.Debug("report failed; retrying later", "seq", meta.Sequence.Stream, "status", out.Status,
		"err", out.Reason(), "retry_in", delay.Round(time.Millisecond).String())
	if err := msg.NakWithDelay(delay); err != nil {
		// Without the nak the report comes back after AckWait instead.
		c.natsFailure("nak", err)
	}
}

// handBack returns a report to the stream for an immediate redelivery, when a stop was cut short. span is
// the report's span, nil when it has none.
func (c *Consumer) handBack(msg jetstream.Msg, meta *jetstream.MsgMetadata, span trace.Span) {
	spanSettled(span, spanHandedBack, "handed_back", 0, 0)
	if err := msg.Nak(); err != nil {
		c.natsFailure("nak", err)
		return
	}
	c.stats.handedBack.Add(1)
	c.log.Debug("report handed back at the stop", "seq", meta.Sequence.Stream)
}

// backoff is the redelivery delay after the report's n-th delivery failed.
func (c *Consumer) backoff(meta *jetstream.MsgMetadata) time.Duration {
	n := int(min(meta.NumDelivered, 64))
	return retry.Backoff(c.cfg.BackoffMin, c.cfg.BackoffMax, max(n-1, 0))
}

// ack acknowledges a settled report and waits for the server's confirmation.
func (c *Consumer) ack(msg jetstream.Msg) {
	actx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
	err := msg.DoubleAck(actx)
	cancel()
	if err != nil {
		c.stats.ackFailures.Add(1)
		c.natsFailure("acknowledgement", err)
		return
	}
	if c.natsFailed.CompareAndSwap(true, false) {
		c.log.Info("JetStream acknowledgements succeed again")
	}
}

// natsFailure logs the first of a series of failed JetStream operations on reports; the rest go to debug.
func (c *Consumer) natsFailure(op string, err error) {
	if c.natsFailed.CompareAndSwap(false, true) {
		c.log.Warn("JetStream "+op+" failed; the report will be delivered again", "err", err)
		return
	}
	c.log.Debug("JetStream "+op+" failed", "err", err)
}

// observe records how a report was settled, once it is (acknowledged, handed back for a delayed
// redelivery, or its dead letter stored): on the Observer and on the report's span (nil with tracing off).
// kind is one of outcomeKinds; delay is a redelivery's.
func (c *Consumer) observe(span trace.Span, kind string, status int, delay time.Duration) {
	if c.cfg.Observer != nil {
		c.cfg.Observer.Outcome(kind, statusClass(status))
	}
	switch kind {
	case "accepted":
		spanSettled(span, spanAcknowledged, kind, status, 0)
	case "retry":
		spanSettled(span, spanRedelivery, kind, status, delay)
	default:
		spanSettled(span, spanDeadLettered, kind, status, 0)
	}
}

// statusClass returns "1xx" to "5xx", or "none".
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "none"
	}
	return strconv.Itoa(status/100) + "xx"
}

// reportKey identifies a report's stored message: its stream, sequence and storage time (nanoseconds),
// so that a re-created stream reusing sequence numbers does not collide.
func reportKey(meta *jetstream.MsgMetadata) string {
	return meta.Stream + "-" + strconv.FormatUint(meta.Sequence.Stream, 10) + "-" +
		strconv.FormatInt(meta.Timestamp.UnixNano(), 10)
}

// idempotencyKey is the producer's Nats-Msg-Id when it is usable as an Idempotency-Key
// (upstream.ValidIdempotencyKey), else reportKey: the same for every delivery of the report.
func idempotencyKey(msg jetstream.Msg, meta *jetstream.MsgMetadata) string {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); upstream.ValidIdempotencyKey(id) {
		return id
	}
	return reportKey(meta)
}
