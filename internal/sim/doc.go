// Package sim simulates the provider's whole upstream API (docs/upstream.md, api/openapi.yaml) for the
// demo, tests and benchmarks. It is never imported by production
// code paths.
//
// A Server serves, under Options.BasePath (default "/v1.0"):
//
//	GET    /locations               searchLocations       a seed set of 77 European locations
//	GET    /orders                  listOpenOrders        ids of the caller's open booking orders
//	POST   /orders                  createOrder           create a booking order (201 {"id":...})
//	GET    /orders/{id}             getOrder              read
//	PUT    /orders/{id}             updateOrder           update (only while open)
//	DELETE /orders/{id}             deleteOrder           delete (only while open)
//	GET    /tracking                queryTracking         tracked unit of an order position or client refs
//	POST   /tracking/events         reportTrackingEvent   report a tracking event (202; Idempotency-Key)
//	GET    /tracking/events/stream  streamTrackingEvents  Server-Sent Events of the caller's tracking events
//
// and, outside the base path, the Keycloak-like token endpoint TokenPath ("/auth/token": password and
// refresh_token grants, docs/upstream.md#authentication) and the OpenAPI document of the API at OpenAPIPath
// ("/openapi.yaml", package api, no authentication). Every API operation requires "Authorization: Bearer
// <access token>"; an expired token is answered 401 with the WWW-Authenticate header of
// docs/upstream.md#expired-tokens (error_description "Jwt expired at <UTC instant>"), an unknown one likewise
// with error_description "The access token is invalid", a missing one with a bare "Bearer" challenge (RFC
// 6750 §3). Failures carry an ApiResponseMessage {"messages":[...]}; a validation failure lists every
// problem, naming the property path ("unit.loadingState is missing"). Every request is also checked against
// the OpenAPI document (openapi3filter); its problems are answered 400 once the operation's own checks, which
// come first and keep their words, have passed. Property names are matched exactly; unknown JSON fields, case
// variants of a property's name included, are ignored.
//
// An order stays open (docs/upstream.md#open-orders: listed, updatable, deletable) until a slot request is
// booked from it: Server.MarkBooked, or for every order Options.BookAfter (flag -book-after) after its
// creation.
//
// Each user has 16 tracked order positions (Server.TrackedOrders), the units operation queryTracking answers
// for. Ownership of orders is the provider's one permission rule: a report naming another user's tracked
// position is answered 403, one naming a position nobody tracks 404, and queryTracking likewise; a report
// without an order is accepted and belongs to no tracked unit.
//
// # Event log
//
// Each user has one ordered event log. Its entries are numbered 1, 2, 3, … and each entry's SSE id is
// EventID(seq) ("ev-" and the sequence number zero-padded to 16 digits, so ids sort as strings in log
// order), except for injected events, which carry the id the test chose. The log holds
//
//   - generated events. With Options.EventRate > 0 the generator appends event k (k = 0, 1, …) at
//     start + k/EventRate, start being the user's first stream connection, and that is the event's
//     timestamp; a stream connection writes it at that moment. With
//     EventRate < 0 (flood) events are appended as fast as a stream reader takes them, in bursts whose
//     events share the burst's time as timestamp. Generated events are not stored: their bytes are
//     computed from (seq, k, timestamp), so a long flood costs no memory. GeneratedEvent returns them;
//   - reported events (reportTrackingEvent): the report's event object with "id" set to the entry's SSE
//     id and a timestamp with a non-zero offset converted to UTC, event name its type;
//   - injected events (Server.Inject): any bytes, for testing clients.
//
// A stream connection replays the retained log after its Last-Event-ID (from the beginning of the
// retained log when absent, or unknown, which is logged) and then continues live. Options.Retention
// bounds the retained entries.
//
// Generated data is a TrackingEvent of about Options.EventSize bytes:
//
//	{"id":"ev-…","timestamp":"<RFC 3339, UTC, nanoseconds>","type":"GATE_IN","observation":{…}}
//
// with a means of transport (truck at gates, barge or train otherwise), a loading unit with a valid ISO
// 6346 number and a location of the seed set; it is padded with seals (and, beyond 100 seals, a "note"
// string). Event k belongs to tracked position k mod 16 of TrackedOrders and has type
// GATE_IN, GATE_OUT, ARRIVED, DEPARTED, HANDLING_STARTED, HANDLING_FINISHED in turn ((k/16) mod 6), except
// every 50th event (k mod 50 = 49), which is UNKNOWN.
//
// A stream message is "id: …\nevent: …\ndata: …\n\n" (see appendEvent); a connection starts with
// "retry: <ms>\n\n" when Options.Retry is set, and an idle connection gets ": keep-alive\n\n" every
// Options.Heartbeat.
//
// # Faults
//
// Faults (latency, 503s, 429s, dropped connections, cut events, forced statuses, rejected reports) are
// set in Options.Faults and changed at any time with SetFaults, concurrently with running requests.
package sim
