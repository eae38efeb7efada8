// Package publish owns JetStream publishing of tracking events. It knows nothing about HTTP; the stream
// layout comes from internal/streams and the dead-letter headers and size bounds from internal/deadletter.
//
// Files: options.go (Config, Observer, the dead-letter reasons), publisher.go (Publisher: Handle, Resume,
// Run), window.go (the asynchronous publish window and its settling), acks.go (JetStream's
// acknowledgements, matched to the window), recover.go (sending failed publishes again with the same
// Nats-Msg-Id), cursor.go (the resume cursor read from the events stream, and the events to skip after a
// restart), message.go (an event's message and subject), headers.go (its headers and how ids travel in
// them), deadletter.go (events that cannot be published as such: not JSON, oversize, too large for NATS),
// scan.go and jsonlex.go (ScanEvent), subject.go (type tokens), errors.go (sentinel errors).
package publish
