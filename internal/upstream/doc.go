// Package upstream owns everything HTTP towards the provider's Container Logistics Integration API:
// the OAuth 2.0 token source, the Server-Sent Events tracking stream and the report client.
// It never imports NATS.
package upstream
