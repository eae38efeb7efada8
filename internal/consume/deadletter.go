package consume

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// deadLetter publishes the report to DLQSubject with its reason, then acknowledges it. When the publish
// fails, the report is handed back for a later redelivery, and its span (nil with tracing off) says so.
func (c *Consumer) deadLetter(msg jetstream.Msg, meta *jetstream.MsgMetadata, kind string, status int, reason string,
	span trace.Span) {
	dl := deadLetterMsg(c.cfg.DLQSubject, msg, meta, status, reason, c.dlqLimit())
	err := c.publishDeadLetter(dl)
	if layout.TooLarge(err) {
		// The limits changed since they were read (the stream's max_msg_size lowered, a failover to a
		// server with a smaller max_payload): read them again and send a dead letter that fits.
		c.readDLQLimit(context.Background())
		limit := c.dlqLimit()
		if limit <= 0 || limit >= int64(layout.MsgSize(dl)) {
			limit = int64(layout.MsgSize(dl)) - 1 // refused for a reason the limits read do not show
		}
		if smaller := deadLetterMsg(c.cfg.DLQSubject, msg, meta, status, reason, limit); layout.MsgSize(smaller) < layout.MsgSize(dl) {
			err = c.publishDeadLetter(smaller)
		}
	}
	if err != nil {
		c.stats.dlqFailures.Add(1)
		c.natsFailure("dead-letter publish", err)
		delay := c.backoff(meta)
		spanSettled(span, spanRedelivery, "retry", status, delay)
		if nerr := msg.NakWithDelay(delay); nerr != nil {
			c.natsFailure("nak", nerr)
		}
		return
	}
	switch kind {
	case "invalid":
		c.stats.invalid.Add(1)
	case "rejected":
		c.stats.rejected.Add(1)
	case "expired":
		c.stats.expired.Add(1)
	}
	c.observe(span, kind, status, 0)
	c.logDeadLetter(meta, kind, status, reason)
	c.ack(msg)
}

// logDeadLetter logs a stored dead letter, at most one line per kind and upstream status per
// Config.DeadLetterLogEvery: any producer can publish invalid reports at will, and a line for each would
// let it flood the log. The line names the report it was written for and counts the dead letters of that
// kind and status left unlogged since the last one; the metric and the dead letters count every one.
func (c *Consumer) logDeadLetter(meta *jetstream.MsgMetadata, kind string, status int, reason string) {
	ok, suppressed := c.dlqLog.Allow(kind + " " + strconv.Itoa(status))
	if !ok {
		return
	}
	attrs := []any{"subject", c.cfg.DLQSubject, "seq", meta.Sequence.Stream, "kind", kind, "err", reason}
	if status != 0 {
		attrs = append(attrs, "status", status)
	}
	c.log.Warn("report dead-lettered", append(attrs, "suppressed", suppressed)...)
}

func (c *Consumer) publishDeadLetter(dl *nats.Msg) error {
	pctx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
	defer cancel()
	_, err := c.js.PublishMsg(pctx, dl)
	return err
}

// dlqLimit is the largest dead letter NATS stores (see layout.MaxMessage).
func (c *Consumer) dlqLimit() int64 {
	return layout.MaxMessage(c.js.Conn().MaxPayload(), c.dlqMax.Load())
}

// readDLQLimit reads the max_msg_size of DLQStream, keeping the last known value when it cannot.
func (c *Consumer) readDLQLimit(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	if c.cfg.DLQStream == "" {
		return
	}
	if n, err := layout.MaxMsgSize(ctx, c.js, c.cfg.DLQStream); err == nil {
		c.dlqMax.Store(n)
	} else {
		c.log.Debug("dead-letter stream's max_msg_size unknown", "stream", c.cfg.DLQStream, "err", err)
	}
}

// deadLetterMsg builds the dead letter of a report (see Consumer). It is always storable: headers whose
// names nats.go cannot send are left out; when the report's headers would take the header block past
// what JetStream stores, or the message past maxSize (the largest message the dead-letter stream stores,
// see layout.MaxMessage; 0: no bound) even with a description in place of the report, the report's
// headers go; a report too large with the headers is described (see layout.Fit). A dead
// letter that cannot be stored would be redelivered forever.
func deadLetterMsg(subject string, msg jetstream.Msg, meta *jetstream.MsgMetadata, status int, reason string,
	maxSize int64) *nats.Msg {
	key := reportKey(meta)
	dl := nats.NewMsg(subject)
	dl.Data = msg.Data()
	left := 0
	for k, vs := range msg.Headers() {
		k = layout.OriginalKey(k)
		if !sendableHeaderKey(k) {
			left++
			continue
		}
		dl.Header[k] = append([]string(nil), vs...)
	}
	if left > 0 {
		reason += fmt.Sprintf("; %d report header(s) with names a NATS client cannot send were left out", left)
	}
	setDeadLetterHeaders(dl.Header, meta, status, reason)
	if layout.HeaderSize(dl) <= layout.MaxHeaderBlock {
		// A description lengthens Bridge-Error, which may take the header block over after all.
		fitted := layout.Fit(dl, maxSize, key)
		if !fitted || int64(layout.MsgSize(dl)) <= maxSize && layout.HeaderSize(dl) <= layout.MaxHeaderBlock {
			return dl
		}
	}
	dl.Header = nats.Header{}
	dl.Data = msg.Data()
	setDeadLetterHeaders(dl.Header, meta, status, reason+"; the report's headers were dropped: too large for a dead letter")
	layout.Fit(dl, maxSize, key)
	return dl
}

// sendableHeaderKey reports whether nats.go sends a header of this name (printable ASCII without
// separators, as ADR-4 and nats.go's stricter check have it); the server accepts others from other
// clients.
func sendableHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 33 || c > 126 || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// setDeadLetterHeaders sets the bridge's headers of a report's dead letter.
func setDeadLetterHeaders(h nats.Header, meta *jetstream.MsgMetadata, status int, reason string) {
	h.Set(layout.HeaderError, logging.Clip(reason, layout.MaxErrorHeader))
	if status != 0 {
		h.Set(layout.HeaderUpstreamStatus, strconv.Itoa(status))
	} else {
		h.Del(layout.HeaderUpstreamStatus)
	}
	h.Set(layout.HeaderReportSequence, strconv.FormatUint(meta.Sequence.Stream, 10))
	h.Set(layout.HeaderReportTime, meta.Timestamp.UTC().Format(time.RFC3339Nano))
	h.Set(layout.HeaderDeliveries, strconv.FormatUint(meta.NumDelivered, 10))
	h.Set(jetstream.MsgIDHeader, reportKey(meta)+"-dlq")
}
