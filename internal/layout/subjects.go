package layout

import (
	"strings"
	"unicode"
)

// DefaultPrefix is the bridge's default subject prefix P (BRIDGE_SUBJECT_PREFIX).
const DefaultPrefix = "tracking"

// Events is P.events.>, every event of every type and unit: the filter of event consumers.
func Events(prefix string) string { return prefix + ".events.>" }

// EventBase is P.events., to which an event's type and unit tokens are appended.
func EventBase(prefix string) string { return prefix + ".events." }

// Event is P.events.<TYPE>, where events of one type stored before the subject carried the unit token
// sit: for reading them (with EventsOfType for the later ones), never for publishing. eventType as the
// event's type field has it, mapped by TypeToken.
func Event(prefix, eventType string) string { return EventBase(prefix) + TypeToken(eventType) }

// EventSubject is P.events.<TYPE>.<UNIT>, the subject of one event (docs/subjects.md#subjects): typeToken
// and unitToken as TypeToken and UnitToken make them.
func EventSubject(prefix, typeToken, unitToken string) string {
	return EventBase(prefix) + typeToken + "." + unitToken
}

// EventsOfType is P.events.<TYPE>.*, the filter of the events of one type, every unit: eventType as the
// event's type field has it, mapped by TypeToken.
func EventsOfType(prefix, eventType string) string {
	return EventBase(prefix) + TypeToken(eventType) + ".*"
}

// EventsOfUnit is P.events.*.<UNIT>, the filter of the events of one loading unit, every type: number as
// the event's observation.observedLoadingUnit.loadingUnit.number has it, mapped by UnitToken. A number
// that maps to NoUnit gives the filter of the events that name no unit.
func EventsOfUnit(prefix, number string) string { return EventBase(prefix) + "*." + UnitToken(number) }

// Fence is P.leader, the base of the events stream's fence subjects (P.leader.<n>, P.leader.restart),
// which hold the leaders' markers, never events.
func Fence(prefix string) string { return prefix + ".leader" }

// FenceFilter is P.leader.>, the events stream's filter for the fence subjects.
func FenceFilter(prefix string) string { return Fence(prefix) + ".>" }

// Reports is P.reports, where producers publish reports for the bridge to send upstream.
func Reports(prefix string) string { return prefix + ".reports" }

// DLQ is P.dlq.>, every dead letter; DLQEvents and DLQReports are its two subjects: the upstream events
// the bridge could not publish as events, and the reports it could not deliver.
func DLQ(prefix string) string        { return prefix + ".dlq.>" }
func DLQEvents(prefix string) string  { return prefix + ".dlq.events" }
func DLQReports(prefix string) string { return prefix + ".dlq.reports" }

// API is P.api.<op>, the subject of one operation of the request-reply API ("orders.get").
func API(prefix, op string) string { return prefix + ".api." + op }

// The operations of the request-reply API (docs/api.md): each is the tail of its subject after P.api.
const (
	OpSearchLocations = "locations.search" // upstream operation searchLocations
	OpListOrders      = "orders.list"      // upstream operation listOpenOrders
	OpCreateOrder     = "orders.create"    // upstream operation createOrder
	OpGetOrder        = "orders.get"       // upstream operation getOrder
	OpUpdateOrder     = "orders.update"    // upstream operation updateOrder
	OpDeleteOrder     = "orders.delete"    // upstream operation deleteOrder
	OpQueryTracking   = "tracking.query"   // upstream operation queryTracking
	OpReportEvent     = "tracking.report"  // upstream operation reportTrackingEvent
	OpUnitLatest      = "units.get"        // the latest event of a loading unit, from the units bucket
	OpUnitEvents      = "units.events"     // a loading unit's most recent stored events, from the events stream
)

// APIOperations returns every operation of the request-reply API in the order of
// docs/api.md#endpoints: the
// endpoints the API service serves, the names BRIDGE_API_ENDPOINTS accepts, tracking's Op constants. The
// slice is the caller's.
func APIOperations() []string {
	return []string{OpSearchLocations, OpListOrders, OpCreateOrder, OpGetOrder, OpUpdateOrder, OpDeleteOrder,
		OpQueryTracking, OpReportEvent, OpUnitLatest, OpUnitEvents}
}

// EventsStream, ReportsStream and DLQStream are the names of the bridge's JetStream streams, PFX_EVENTS,
// PFX_REPORTS and PFX_DLQ; LeaseBucket is the key-value bucket of the leader lease, PFX_LEASES.
func EventsStream(prefix string) string  { return Stream(prefix, "EVENTS") }
func ReportsStream(prefix string) string { return Stream(prefix, "REPORTS") }
func DLQStream(prefix string) string     { return Stream(prefix, "DLQ") }
func LeaseBucket(prefix string) string   { return Stream(prefix, "LEASES") }

// UnitsBucket is the key-value bucket of the latest event per loading unit, PFX_UNITS
// (docs/subjects.md): its keys are unit tokens.
func UnitsBucket(prefix string) string { return Stream(prefix, "UNITS") }

// Stream returns PFX_<kind>: PFX is the prefix upper-cased, every character other than A-Z and 0-9 as
// "_" (TRACKING_EVENTS for the default prefix and kind EVENTS).
func Stream(prefix, kind string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, prefix) + "_" + kind
}

// UnknownType is the subject token of an event whose type is missing, empty or not a string.
const UnknownType = "UNKNOWN"

// MaxTypeToken is the longest subject token an event type maps to, in characters (and bytes).
const MaxTypeToken = 64

// TypeToken maps an event's type to its subject token (docs/subjects.md#subjects): every character outside
// [A-Za-z0-9_-] becomes "_" (one "_" per character, also for a character of several bytes or an invalid
// byte), the result is cut at 64 characters, and an empty type gives UnknownType. The token is never
// empty and never holds a dot, a wildcard or white space. Types the provider adds pass through as their
// own token. A type that is already a token is returned as it is, without allocating.
func TypeToken(eventType string) string {
	if eventType == "" {
		return UnknownType
	}
	clean := len(eventType) <= MaxTypeToken
	for i := 0; clean && i < len(eventType); i++ {
		clean = tokenByte(eventType[i])
	}
	if clean {
		return eventType
	}
	var b strings.Builder
	b.Grow(min(len(eventType), MaxTypeToken))
	for _, r := range eventType {
		if b.Len() == MaxTypeToken {
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

// tokenByte reports whether c may stand in a type token as it is.
func tokenByte(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// NoUnit is the unit token of an event that names no usable loading unit: its number is missing, not a
// string, or maps to nothing or to more than MaxUnitToken characters. The units view keeps no such event.
const NoUnit = "_"

// MaxUnitToken is the longest unit token, in characters (and bytes); a longer one gives NoUnit.
const MaxUnitToken = 64

// UnitToken maps a loading unit's number (the string observation.observedLoadingUnit.loadingUnit.number,
// decoded) to its subject token and units-view key (docs/subjects.md#subjects): upper-cased, every
// character outside [A-Z0-9] removed ("msku 123456-7" gives MSKU1234567). An empty result, or one longer
// than MaxUnitToken, gives NoUnit. Upper-casing is Unicode's, character by character, so a letter
// outside ASCII whose capital is an ASCII letter (the dotless ı gives I) stays; an invalid byte is
// removed. A number that is already a token is returned as it is, without allocating.
func UnitToken(number string) string {
	clean := len(number) > 0 && len(number) <= MaxUnitToken
	for i := 0; clean && i < len(number); i++ {
		c := number[i]
		clean = c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	if clean {
		return number
	}
	var b strings.Builder
	for _, r := range number {
		u := unicode.ToUpper(r)
		if u >= 'A' && u <= 'Z' || u >= '0' && u <= '9' {
			if b.Len() == MaxUnitToken {
				return NoUnit
			}
			b.WriteRune(u)
		}
	}
	if b.Len() == 0 {
		return NoUnit
	}
	return b.String()
}
