package service

// Names of the request bodies a RequestValidator checks: the schemas of api/openapi.yaml that the
// bridge checks before sending a body upstream.
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
