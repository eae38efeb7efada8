package tracking

import "strings"

// DefaultPrefix is the bridge's default subject prefix P (BRIDGE_SUBJECT_PREFIX).
const DefaultPrefix = "tracking"

// Subjects names the subjects and JetStream streams of a bridge with subject prefix Prefix (contract §3,
// §4 and §7). The zero value uses DefaultPrefix.
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
func (s Subjects) Events() string { return s.prefix() + ".events.>" }

// Event is P.events.<TYPE>, the subject of the events of one type: eventType as the event's type field
// has it, mapped by TypeToken ("GATE_IN" gives P.events.GATE_IN).
func (s Subjects) Event(eventType string) string {
	return s.prefix() + ".events." + TypeToken(eventType)
}

// Reports is P.reports, where producers publish reports for the bridge to send upstream.
func (s Subjects) Reports() string { return s.prefix() + ".reports" }

// DLQ is P.dlq.>, every dead letter; DLQEvents and DLQReports are its two subjects: the upstream events
// the bridge could not publish as events, and the reports it could not deliver.
func (s Subjects) DLQ() string        { return s.prefix() + ".dlq.>" }
func (s Subjects) DLQEvents() string  { return s.prefix() + ".dlq.events" }
func (s Subjects) DLQReports() string { return s.prefix() + ".dlq.reports" }

// API is P.api.<op>, the subject of one operation of the request-reply API: op is one of the Op*
// constants. API(">") matches them all.
func (s Subjects) API(op string) string { return s.prefix() + ".api." + op }

// EventsStream, ReportsStream and DLQStream are the names of the bridge's JetStream streams: PFX_EVENTS,
// PFX_REPORTS and PFX_DLQ, PFX the prefix upper-cased with every character other than A-Z and 0-9 as
// "_" (TRACKING_EVENTS for the default prefix).
func (s Subjects) EventsStream() string  { return s.stream("EVENTS") }
func (s Subjects) ReportsStream() string { return s.stream("REPORTS") }
func (s Subjects) DLQStream() string     { return s.stream("DLQ") }

func (s Subjects) stream(kind string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, s.prefix()) + "_" + kind
}

// The operations of the request-reply API, each served on Subjects.API(op) (contract §7).
const (
	OpSearchLocations = "locations.search" // spec 4.1
	OpListOrders      = "orders.list"      // spec 4.2
	OpCreateOrder     = "orders.create"    // spec 4.3
	OpGetOrder        = "orders.get"       // spec 4.4
	OpUpdateOrder     = "orders.update"    // spec 4.5
	OpDeleteOrder     = "orders.delete"    // spec 4.6
	OpQueryTracking   = "tracking.query"   // spec 4.7
	OpReportEvent     = "tracking.report"  // spec 4.8
)

// maxTypeToken is the longest subject token an event type maps to.
const maxTypeToken = 64

// TypeToken returns the subject token of an event type, as the bridge forms it (contract §3): every
// character outside [A-Za-z0-9_-] becomes "_" (one "_" per character, also for a character of several
// bytes), the result is cut at 64 characters, and an empty type gives "UNKNOWN" (so does an event whose
// type is missing or not a string). The token never holds a dot, a wildcard or white space. Types the
// provider adds pass through as their own token.
func TypeToken(eventType string) string {
	if eventType == "" {
		return "UNKNOWN"
	}
	var b strings.Builder
	for _, r := range eventType {
		if b.Len() == maxTypeToken {
			break
		}
		if r < 0x80 && tokenByte(byte(r)) {
			b.WriteByte(byte(r))
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
