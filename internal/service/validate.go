package service

import (
	"encoding/json"

	"github.com/tracking-bridge/tracking-bridge/internal/consume"
)

// Names of the request bodies a RequestValidator checks: the schemas of the provider's spec (2.4 and
// 2.17), as the OpenAPI document of the repository names its components.
const (
	SchemaBookingOrder        = "BookingOrder"
	SchemaTrackingEventReport = "TrackingEventReport"
)

// RequestValidator checks a body the service is about to send upstream against its schema, named by one
// of the Schema* constants, and returns every problem found (nil when there is none). The service answers
// 400 with them and does not call the upstream. Implementations must be safe for concurrent use.
//
// The envelope of each request (the JSON object, its id, order and query members) is checked by the
// service itself; a validator sees only the body that goes upstream verbatim. The daemon uses
// OpenAPIValidator, the check against the OpenAPI document.
type RequestValidator interface {
	Validate(schema string, body []byte) []string
}

// StructuralValidator is the RequestValidator of a Config without one, needing no compiled schema: a
// report gets the report consumer's check (consume.Validate), a booking order a check of its required
// members and their JSON types. Everything else is left to the upstream, which answers 400 with its own
// messages.
type StructuralValidator struct {
	// ReportMaxBytes bounds a report's size as BRIDGE_REPORT_MAX_BYTES does; 0 means no bound.
	ReportMaxBytes int
}

// Validate implements RequestValidator. An unknown schema name passes.
func (v StructuralValidator) Validate(schema string, body []byte) []string {
	switch schema {
	case SchemaTrackingEventReport:
		return consume.Validate(body, v.ReportMaxBytes)
	case SchemaBookingOrder:
		return checkBookingOrder(body)
	}
	return nil
}

// checkBookingOrder checks the required members of a BookingOrder (spec 2.4) and their JSON types.
func checkBookingOrder(body []byte) []string {
	env, problems := parseEnvelope(body, false)
	if problems != nil {
		return problems
	}
	var c checker
	c.str(env, "terminalId", true)
	c.str(env, "action", true)
	c.str(env, "reference", true)
	if unit, ok := c.object(env, "unit", true); ok {
		var u envelope
		if json.Unmarshal(unit, &u) == nil {
			var uc checker
			uc.str(u, "loadingState", true)
			for _, p := range uc.problems {
				c.addf("unit.%s", p)
			}
		}
	}
	if _, present := env["clientContext"]; present {
		c.object(env, "clientContext", false)
	}
	return c.problems
}
