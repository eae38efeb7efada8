// Package publish owns JetStream publishing of tracking events: subject mapping, message headers,
// the asynchronous publish window with retries under the same Nats-Msg-Id, stream provisioning and
// the resume cursor. It knows nothing about HTTP.
package publish
