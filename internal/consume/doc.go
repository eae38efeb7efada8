// Package consume owns the durable JetStream consumer of tracking reports: validation, acknowledgement
// after the upstream accepted a report, delayed redelivery on transient failures and dead letters.
package consume
