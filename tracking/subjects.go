package tracking

import "github.com/tracking-bridge/tracking-bridge/internal/layout"

// DefaultPrefix is the bridge's default subject prefix P (BRIDGE_SUBJECT_PREFIX).
const DefaultPrefix = layout.DefaultPrefix

// Subjects names the subjects and JetStream streams of a bridge with subject prefix Prefix
// (docs/subjects.md#subjects, docs/subjects.md#streams, docs/api.md#endpoints), with the bridge's own naming
// (internal/layout). The zero value uses DefaultPrefix.
type Subjects struct {
	Prefix string
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// Events is P.events.>, every event of every type.
func (s Subjects) Events() string { return layout.Events(s.prefix()) }

// Event is P.events.<TYPE>, the subject of the events of one type: eventType as the event's type field
// has it, mapped by TypeToken ("GATE_IN" gives P.events.GATE_IN).
func (s Subjects) Event(eventType string) string {
	return layout.Event(s.prefix(), eventType)
}

// Reports is P.reports, where producers publish reports for the bridge to send upstream.
func (s Subjects) Reports() string { return layout.Reports(s.prefix()) }

// DLQ is P.dlq.>, every dead letter; DLQEvents and DLQReports are its two subjects: the upstream events
// the bridge could not publish as events, and the reports it could not deliver.
func (s Subjects) DLQ() string        { return layout.DLQ(s.prefix()) }
func (s Subjects) DLQEvents() string  { return layout.DLQEvents(s.prefix()) }
func (s Subjects) DLQReports() string { return layout.DLQReports(s.prefix()) }

// API is P.api.<op>, the subject of one operation of the request-reply API: op is one of the Op*
// constants. API(">") matches them all.
func (s Subjects) API(op string) string { return layout.API(s.prefix(), op) }

// EventsStream, ReportsStream and DLQStream are the names of the bridge's JetStream streams: PFX_EVENTS,
// PFX_REPORTS and PFX_DLQ, PFX the prefix upper-cased with every character other than A-Z and 0-9 as
// "_" (TRACKING_EVENTS for the default prefix).
func (s Subjects) EventsStream() string  { return layout.EventsStream(s.prefix()) }
func (s Subjects) ReportsStream() string { return layout.ReportsStream(s.prefix()) }
func (s Subjects) DLQStream() string     { return layout.DLQStream(s.prefix()) }

// The operations of the request-reply API, each served on Subjects.API(op) (docs/api.md): the bridge's
// own names (internal/layout), not a copy.
const (
	OpSearchLocations = layout.OpSearchLocations // "locations.search", upstream operation searchLocations
	OpListOrders      = layout.OpListOrders      // "orders.list", upstream operation listOpenOrders
	OpCreateOrder     = layout.OpCreateOrder     // "orders.create", upstream operation createOrder
	OpGetOrder        = layout.OpGetOrder        // "orders.get", upstream operation getOrder
	OpUpdateOrder     = layout.OpUpdateOrder     // "orders.update", upstream operation updateOrder
	OpDeleteOrder     = layout.OpDeleteOrder     // "orders.delete", upstream operation deleteOrder
	OpQueryTracking   = layout.OpQueryTracking   // "tracking.query", upstream operation queryTracking
	OpReportEvent     = layout.OpReportEvent     // "tracking.report", upstream operation reportTrackingEvent
	OpUnitLatest      = layout.OpUnitLatest      // "units.get", the latest event of a loading unit, from NATS
	OpUnitEvents      = layout.OpUnitEvents      // "units.events", a loading unit's most recent events, from NATS
)

// TypeToken returns the subject token of an event type, as the bridge forms it (docs/subjects.md#subjects):
// every character outside [A-Za-z0-9_-] becomes "_" (one "_" per character, also for a character of several
// bytes), the result is cut at 64 characters, and an empty type gives "UNKNOWN" (so does an event whose type
// is missing or not a string). The token never holds a dot, a wildcard or white space. Types the provider
// adds pass through as their own token.
func TypeToken(eventType string) string {
	return layout.TypeToken(eventType) // the bridge's own mapping, not a copy
}
