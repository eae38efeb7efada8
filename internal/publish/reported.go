package publish

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/jsonscan"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
)

// ReportedKey returns the key under which the event a report (a TrackingEventReport's JSON, as sent
// upstream) comes back on the upstream's stream: the subject this package gives that event under prefix,
// and the event's timestamp. It reads the report's "event" member as the event path reads an event's
// data (ScanEvent, TypeToken, eventTime), so that the two cannot disagree. False when the report is not
// JSON, its event is not an object, or the event has no timestamp the event path reads as a time (the
// span of such an event looks up nothing). For the report consumer's spans only.
func ReportedKey(prefix string, report []byte) (tracing.ReportedKey, bool) {
	var s jsonscan.Scanner
	s.Reset(report)
	if !s.Object() {
		return tracing.ReportedKey{}, false
	}
	var event []byte
	for key, esc, ok := s.Member(); ok; key, esc, ok = s.Member() {
		v := s.Skip()
		if jsonscan.EqualFold(key, esc, "event") {
			event = v // as encoding/json reads the report: the name in any case, the last one counting
		}
	}
	if s.End() != nil || event == nil {
		return tracing.ReportedKey{}, false
	}
	f, err := ScanEvent(event)
	if err != nil {
		return tracing.ReportedKey{}, false
	}
	at, ok := eventTime(f.Timestamp)
	if !ok {
		return tracing.ReportedKey{}, false
	}
	return tracing.ReportedKey{Subject: layout.EventSubject(prefix, TypeToken(f.Type, f.TypeKind), f.Unit), At: at.UnixNano()}, true
}

// linkReport marks the link from an event's span to its report's span.
var linkReport = attribute.String("bridge.link", "report")

// linkReported links the span of entry e to the span of the report that reported its event, when the
// bridge accepted one recently (Config.Reported). Only a recorded span looks.
func (p *Publisher) linkReported(e *pending) {
	if e.at.IsZero() {
		return
	}
	if sc, ok := p.cfg.Reported.Take(tracing.ReportedKey{Subject: e.subject, At: e.at.UnixNano()}); ok {
		e.span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{linkReport}})
	}
}
