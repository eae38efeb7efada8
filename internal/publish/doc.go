// Package publish owns JetStream publishing of tracking events: event scanning (scan.go), subject
// mapping (subject.go), message headers (headers.go), the asynchronous publish window with retries under
// the same Nats-Msg-Id and the resume cursor (publisher.go), the tracking of JetStream's
// acknowledgements (acks.go), and stream provisioning (streams.go). It knows nothing about HTTP.
package publish
