package tracking

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
	"github.com/tracking-bridge/tracking-bridge/internal/validate"
)

// Reporter publishes tracking event reports to P.reports (docs/subjects.md#reporting-events-producers), from
// where the bridge sends them upstream, retrying transient failures for as long as it takes; a report the
// upstream refuses ends in P.dlq.reports with its reason. A Reporter is safe for concurrent use.
type Reporter struct {
	js       jetstream.JetStream
	subjects Subjects
	// MaxBytes, when positive, refuses a report larger than this many bytes, as the bridge's
	// BRIDGE_REPORT_MAX_BYTES does.
	MaxBytes int
}

// NewReporter returns a Reporter for the bridge with the given prefix ("" is DefaultPrefix).
func NewReporter(js jetstream.JetStream, prefix string) *Reporter {
	return &Reporter{js: js, subjects: Subjects{Prefix: prefix}}
}

// Receipt is JetStream's acknowledgement of a report: it is stored and will reach the upstream or the
// dead-letter subject.
type Receipt struct {
	// MsgID is the report's Nats-Msg-Id: the caller's key, or the one Report generated.
	MsgID string
	// Stream and Sequence say where it is stored (PFX_REPORTS).
	Stream   string
	Sequence uint64
	// Duplicate is true when JetStream already had a report with this MsgID within the stream's
	// duplicate window (2 minutes) and dropped this one: the earlier one counts.
	Duplicate bool
}

// Report publishes report with the Nats-Msg-Id key and waits for JetStream's acknowledgement. An empty
// key gets a random one (returned in the Receipt). The key is the report's idempotency key: JetStream
// drops a repeat within its duplicate window and the bridge sends it upstream as Idempotency-Key, so
// after an error (a timeout, say) the same report with the same key may be published again safely.
//
// The report is checked first as the bridge will check it (the OpenAPI document's TrackingEventReport),
// and for the zero values a Go struct would send for its required members (a zero Timestamp, an empty
// Type); one that fails gives an *InvalidReportError and is not published.
func (r *Reporter) Report(ctx context.Context, report TrackingEventReport, key string) (Receipt, error) {
	if problems := zeroRequired(report); len(problems) > 0 {
		return Receipt{}, &InvalidReportError{Problems: problems}
	}
	body, err := json.Marshal(report)
	if err != nil {
		return Receipt{}, fmt.Errorf("tracking: report: %w", err)
	}
	return r.ReportJSON(ctx, body, key)
}

// ReportJSON is Report for a report already encoded as JSON; the bridge sends these bytes upstream as
// they are.
func (r *Reporter) ReportJSON(ctx context.Context, body []byte, key string) (Receipt, error) {
	if problems := validate.Report(body, r.MaxBytes); len(problems) > 0 {
		return Receipt{}, &InvalidReportError{Problems: problems}
	}
	if key == "" {
		var b [16]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		key = "report-" + hex.EncodeToString(b[:])
	}
	msg := &nats.Msg{Subject: r.subjects.Reports(), Data: body, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, key)
	carrier.Inject(ctx, msg.Header) // the caller's trace, when ctx holds a span: the bridge's span continues it
	ack, err := r.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(r.subjects.ReportsStream()))
	if err != nil {
		return Receipt{MsgID: key}, fmt.Errorf("tracking: report %q on %s: %w", key, msg.Subject, err)
	}
	return Receipt{MsgID: key, Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// zeroRequired lists the required members of a report left at their zero value, which encoding/json
// would send as "0001-01-01T00:00:00Z" and "": valid JSON of the right types, but never meant.
func zeroRequired(report TrackingEventReport) []string {
	var problems []string
	if report.Event.Timestamp.IsZero() {
		problems = append(problems, "event.timestamp is missing (the zero time)")
	}
	if report.Event.Type == "" {
		problems = append(problems, "event.type is missing (empty)")
	}
	if o := report.Order; o != nil && (o.OrderId == "" || o.PositionId == "") {
		problems = append(problems, "order.orderId and order.positionId must both be given")
	}
	return problems
}
