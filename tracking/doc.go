// Package tracking is the Go client of tracking-bridge for downstream services: the types of the
// provider's API, the subjects and streams the bridge uses, a consumer of the tracking events it
// publishes, a producer of reports, and a typed client of its request-reply API (docs/subjects.md,
// docs/api.md).
//
// The types (types.gen.go) are generated from the OpenAPI document api/openapi.yaml, the same document the
// bridge validates reports and booking orders with: TrackingEvent is the data of an event on
// P.events.<TYPE>.<UNIT>, TrackingEventReport the body of a report on P.reports, BookingOrder, TrackedUnit and
// PaginatedLocationResponse the bodies of the API. TrackingEventType is a plain string, because the
// provider adds new types; the other enumerations have constants and a Valid method.
//
// Subjects names every subject and stream for a prefix, TypeToken the subject token of an event type.
// EventConsumer reads events from the events stream through a JetStream consumer of the caller's
// configuration and decodes them (Event); Reporter publishes reports and waits for JetStream's
// acknowledgement; Client calls the API and returns its failures as *APIError. Client.UnitLatest and
// Client.UnitEvents answer where a loading unit is now and what happened to it, from NATS without the
// provider (UnitEvent).
//
// The same subjects, headers, streams and endpoints are described as an AsyncAPI 3.0 document,
// api/asyncapi.yaml in the repository, for tools and for clients in other languages; a test holds it
// against the bridge's code.
//
// Everything talks to NATS only: the bridge holds the provider's OAuth credentials.
//
// Clients belong in NATS accounts of their own, never in the bridge's (JetStream writes its answers to
// whatever reply subject a publisher names, inside the publisher's account). With the repository's
// deploy/nats/nats-accounts.conf, Reporter and Client work unchanged over their accounts' service imports;
// an events reader fetches from a durable an operator created for it in the bridge's account, through
// the JetStream API prefix its account imports: make js with jetstream.NewWithAPIPrefix(nc,
// "JS.tracking.API") and set EventConsumerConfig.Bind with Consumer.Durable.
package tracking
