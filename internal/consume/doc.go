// Package consume owns the durable JetStream consumer of tracking reports: validation, acknowledgement
// after the upstream accepted a report, delayed redelivery on transient failures and dead letters.
//
// Producers publish TrackingEventReport JSON (docs/subjects.md#reporting-events-producers) to P.reports,
// captured by the work-queue stream PFX_REPORTS. A Consumer fetches them with a durable pull consumer, sends
// at most Config.Concurrency upstream at a time, and settles each one exactly one way:
//
//	valid, upstream 2xx                     → acknowledged (AckSync): removed from the work queue
//	valid, 401/408/425/429/5xx, network     → Nak with a delay (exponential, ≥ Retry-After); redelivered
//	valid, other 4xx                        → dead letter on P.dlq.reports with the upstream's status and messages
//	invalid (validate.Report), or too large → dead letter with every problem found; the upstream is not called
//	header block the client cannot decode   → dead letter with the lines it could read (see headers.go)
//	still failing transiently after MaxAge  → dead letter with the last reason (only when MaxAge > 0)
//
// and a dead letter is stored (JetStream publish acknowledged) before the report is acknowledged. No path
// drops a report: the worst a crash can do is send a report upstream twice (with the same
// Idempotency-Key) or store its dead letter twice (with the same Nats-Msg-Id, dropped by the DLQ stream's
// duplicate window).
//
// The consumer's MaxDeliver is unlimited, so JetStream never gives up on a report by itself (no
// max-deliveries advisory to watch); the optional MaxAge, measured from the report's JetStream
// timestamp, is the only limit. The classification of upstream answers is upstream.Classify; this
// package only decides what to do with its outcome (an upstream.Outcome), and builds dead letters with
// the headers and size bounds of internal/layout. A report is checked by internal/validate, the
// check the API service and package tracking's Reporter share. It does not import internal/publish; of
// internal/upstream it uses the Outcome of a report attempt and the idempotency-key check; the report
// client is handed in as a Sender.
//
// Files: options.go (Config, defaults, the Sender and Observer interfaces), consumer.go (New, Run, the
// durable consumer's set-up), pull.go (the pull loop, probes, fetch errors), circuit.go (holding fetches
// while the upstream fails), settle.go (one report's attempt, acknowledgement and delayed redelivery),
// deadletter.go (a report's dead letter), headers.go (reports whose header block the client could not
// decode) and status.go (Ready, Pending, Stats).
package consume
