// Package layout is what a NATS client sees of the bridge, named in one place: its subjects, JetStream
// streams and lease bucket (docs/subjects.md, docs/api.md#endpoints), the streams' configuration and
// their creation at start-up, and the Bridge-* headers and sizing of dead letters
// (docs/subjects.md#dead-letters). The daemon, the event path (internal/publish), the report path
// (internal/consume), the API service and the public package tracking all use it, so a producer or
// consumer built on tracking names exactly what the bridge serves.
//
// subjects.go names the subjects and streams and maps an event's type to its subject token;
// streams.go has the streams' layout (Streams), their configuration and Ensure; deadletter.go the
// dead-letter headers and Fit; size.go the sizes and limits NATS applies to a message.
//
// It imports nats.go, the standard library and internal/logging, no more than package tracking compiles
// anyway.
package layout
