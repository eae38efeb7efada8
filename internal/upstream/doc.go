// Package upstream owns everything HTTP towards the provider's Container Logistics Integration API:
// the OAuth 2.0 token source, the Server-Sent Events tracking stream, the report client and the API client
// of the request-reply service (api.go). It also defines what the HTTP side hands the NATS side: the
// Event the stream reader passes to the event path (event.go) and the Outcome of one report attempt
// (outcome.go, idempotency.go). It never imports NATS.
package upstream
