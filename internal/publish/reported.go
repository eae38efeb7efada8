package publish

import (
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
)

// ReportedKey returns the key under which the event a report (a TrackingEventReport's JSON, as sent
// upstream) comes back on the upstream's stream: the subject this package gives that event under prefix,
// and the event's timestamp. False when the report's event has no type or no valid timestamp. For the
// report consumer's spans only: it decodes the whole report.
func ReportedKey(prefix string, report []byte) (tracing.ReportedKey, bool) {
	var r struct {
		Event struct {
			Type        json.RawMessage `json:"type"`
			Timestamp   string          `json:"timestamp"`
			Observation struct {
				LoadingUnit struct {
					Unit struct {
						Number *string `json:"number"`
					} `json:"loadingUnit"`
				} `json:"observedLoadingUnit"`
			} `json:"observation"`
		} `json:"event"`
	}
	if json.Unmarshal(report, &r) != nil {
		return tracing.ReportedKey{}, false
	}
	var typ string
	if json.Unmarshal(r.Event.Type, &typ) != nil {
		return tracing.ReportedKey{}, false
	}
	at, _, _, ok := rfc3339.Parse(r.Event.Timestamp)
	if !ok {
		return tracing.ReportedKey{}, false
	}
	unit := layout.NoUnit
	if n := r.Event.Observation.LoadingUnit.Unit.Number; n != nil {
		unit = layout.UnitToken(*n)
	}
	return tracing.ReportedKey{Subject: layout.EventSubject(prefix, TypeToken(typ, KindString), unit), At: at.UnixNano()}, true
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
