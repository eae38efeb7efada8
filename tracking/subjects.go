package tracking

import (
	"slices"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

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

// Events is P.events.>, every event of every type and unit.
func (s Subjects) Events() string { return layout.Events(s.prefix()) }

// Event is P.events.<TYPE>.<UNIT>, the subject of the events of one type and one loading unit: eventType
// as the event's type field has it, mapped by TypeToken, and number as the event's
// observation.observedLoadingUnit.loadingUnit.number has it, mapped by UnitToken ("GATE_IN" and
// "msku 123456-5" give P.events.GATE_IN.MSKU1234565).
func (s Subjects) Event(eventType, number string) string {
	return layout.EventSubject(s.prefix(), layout.TypeToken(eventType), layout.UnitToken(number))
}

// EventsOfType is P.events.<TYPE>.*, the events of one type, every unit ("GATE_IN" gives
// P.events.GATE_IN.*). Events stored before the subject carried the unit sit on P.events.<TYPE>, which
// this does not match: TypeFilters names both.
func (s Subjects) EventsOfType(eventType string) string {
	return layout.EventsOfType(s.prefix(), eventType)
}

// TypeFilters returns the filter subjects of the events of one type, every unit, including those stored
// before the subject carried the unit: P.events.<TYPE>.* and P.events.<TYPE>. The two do not overlap, so
// both may stand in one JetStream consumer's FilterSubjects (EventConsumerConfig.Types uses them).
func (s Subjects) TypeFilters(eventType string) []string {
	return []string{s.EventsOfType(eventType), layout.Event(s.prefix(), eventType)}
}

// EventsOfUnit is P.events.*.<UNIT>, the events of one loading unit, every type: number as the event's
// observation.observedLoadingUnit.loadingUnit.number has it, mapped by UnitToken ("msku 123456-5" gives
// P.events.*.MSKU1234565). A number that maps to NoUnit gives the events that name no unit.
func (s Subjects) EventsOfUnit(number string) string {
	return layout.EventsOfUnit(s.prefix(), number)
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

// EventFilters returns the filter subjects of the events of the given types and loading units, without
// repeats, for a JetStream consumer's FilterSubjects or one subscription each:
//
//   - types alone: TypeFilters of each type (old events of the type too);
//   - units alone: EventsOfUnit of each number;
//   - both: Event of each type and number, the events of those types that name those units;
//   - neither: Events, every event.
//
// Events stored before the subject carried the unit have no unit token, so a filter by unit does not
// find them: read the type's events and pick the unit from their data.
func (s Subjects) EventFilters(types, units []string) []string {
	var out []string
	add := func(subjects ...string) {
		for _, subj := range subjects {
			if !slices.Contains(out, subj) { // "GATE IN" and "GATE_IN" share one
				out = append(out, subj)
			}
		}
	}
	switch {
	case len(types) == 0 && len(units) == 0:
		add(s.Events())
	case len(units) == 0:
		for _, t := range types {
			add(s.TypeFilters(t)...)
		}
	case len(types) == 0:
		for _, u := range units {
			add(s.EventsOfUnit(u))
		}
	default:
		for _, t := range types {
			for _, u := range units {
				add(s.Event(t, u))
			}
		}
	}
	return out
}

// NoUnit is the unit token of an event that names no usable loading unit (docs/subjects.md#subjects).
const NoUnit = layout.NoUnit

// UnitToken returns the subject token of a loading unit's number, as the bridge forms it
// (docs/subjects.md#subjects): upper-cased, every character outside [A-Z0-9] removed ("msku 123456-5"
// gives MSKU1234565); an empty result, or one longer than 64 characters, gives NoUnit. The same token is
// the unit's key in the units view.
func UnitToken(number string) string {
	return layout.UnitToken(number) // the bridge's own mapping, not a copy
}

// TypeToken returns the subject token of an event type, as the bridge forms it (docs/subjects.md#subjects):
// every character outside [A-Za-z0-9_-] becomes "_" (one "_" per character, also for a character of several
// bytes), the result is cut at 64 characters, and an empty type gives "UNKNOWN" (so does an event whose type
// is missing or not a string). The token never holds a dot, a wildcard or white space. Types the provider
// adds pass through as their own token.
func TypeToken(eventType string) string {
	return layout.TypeToken(eventType) // the bridge's own mapping, not a copy
}
