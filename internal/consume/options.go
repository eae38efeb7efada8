package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Defaults of the Config fields left zero.
const (
	DefaultConcurrency = 16
	DefaultMaxBytes    = 256 << 10
	DefaultBackoffMin  = time.Second
	DefaultBackoffMax  = 5 * time.Minute
	DefaultAckWait     = 2 * time.Minute
	// DefaultProbeInterval is the pace of the probes while the upstream is failing: sparing with a
	// failing upstream, and a recovery is noticed within about a second.
	DefaultProbeInterval = time.Second
)

const (
	// fetchWait is how long one pull request (of a probe) waits for a report on an idle stream.
	fetchWait = 5 * time.Second
	// nextWait bounds one wait for the pull iterator's next report.
	nextWait = 200 * time.Millisecond
	// infoInterval is the pace of the consumer info requests behind Pending and Ready.
	infoInterval = 5 * time.Second
	// opTimeoutMax bounds one JetStream operation of a report (dead-letter publish, acknowledgement).
	opTimeoutMax = 10 * time.Second
	// handBackFlush bounds the wait for the hand-backs of an aborted stop to reach NATS.
	handBackFlush = time.Second
	// handBackWait bounds the wait for a stop cut short at StopTimeout: its hand-backs are publishes that
	// need no answer, and cmd/bridge allows a little time past the shutdown timeout.
	handBackWait = time.Second
)

// Sender delivers one report to the upstream and classifies the answer. *upstream.ReportClient
// implements it. Send must be safe for concurrent use and must return when ctx is done.
type Sender interface {
	Send(ctx context.Context, body []byte, key string) upstream.Outcome
}

// Observer receives the consumer's counts, for metrics. Its methods are called from many goroutines at
// once; implementations must be safe for concurrent use and cheap.
type Observer interface {
	// Consumed is called for every delivery of a report taken from the stream, redeliveries included.
	Consumed()
	// Outcome is called once per delivery that was settled: kind is "accepted" (acknowledged after a 2xx),
	// "retry" (redelivery later), "rejected" (the upstream refused it; dead-lettered), "invalid"
	// (dead-lettered without an upstream call) or "expired" (dead-lettered after MaxAge). statusClass is
	// the class of the upstream's HTTP status, "1xx" to "5xx", or "none" when there was no answer.
	Outcome(kind, statusClass string)
}

// Config configures a Consumer.
type Config struct {
	// Stream is the work-queue stream of reports (TRACKING_REPORTS); it must exist (layout.Streams.Ensure).
	Stream string
	// Durable is the name of the durable pull consumer, created or updated by Run.
	Durable string
	// Subject is the consumer's filter: P.reports.
	Subject string
	// DLQSubject receives rejected reports: P.dlq.reports. A stream must capture it (TRACKING_DLQ).
	DLQSubject string
	// DLQStream is the stream that captures DLQSubject (TRACKING_DLQ): its max_msg_size bounds dead
	// letters. Empty: only the server's max_payload does.
	DLQStream string
	// Concurrency is the most reports being sent upstream at the same time (BRIDGE_REPORT_CONCURRENCY).
	// Reports already answered are settled meanwhile, and at most Concurrency more are fetched ahead, so
	// at most 4×Concurrency reports are unsettled at any time. Default 16.
	Concurrency int
	// MaxBytes is the largest report accepted; a larger one is dead-lettered. Default 256 KiB.
	MaxBytes int
	// MaxAge, when positive, dead-letters a report still failing transiently this long after it was
	// stored in the stream (its JetStream timestamp). Zero retries forever.
	MaxAge time.Duration
	// BackoffMin and BackoffMax bound the capped exponential delay of each report's redeliveries after
	// transient failures. Defaults 1 s and 5 min.
	BackoffMin, BackoffMax time.Duration
	// ProbeInterval is the hold between two probes while the upstream is failing (see Consumer): fixed,
	// whatever the length of the outage, and never shorter than the upstream's Retry-After. Default 1 s.
	ProbeInterval time.Duration
	// AckWait is the consumer's acknowledgement wait: a report the bridge holds unsettled this long (it
	// crashed, or NATS was unreachable when it settled it) is redelivered. One upstream attempt is bounded
	// by AckWait/4, a dead-letter publish and an acknowledgement by AckWait/8 each; even when every stage
	// runs into its bound (the wait for a slot, for a worker, the attempt, the settlement), a report is
	// settled within AckWait of its delivery, so JetStream does not redeliver a report the bridge is still
	// working on. Keep it at least 4× the upstream HTTP timeout. Default 2 min.
	AckWait time.Duration
	// StopTimeout bounds Run's stop (BRIDGE_SHUTDOWN_TIMEOUT), counted from the end of Run's context: the
	// reports in flight then are finished within it; those still waiting on the upstream at its end are
	// handed back (see Run). Zero waits for them without bound.
	StopTimeout time.Duration
	// DeadLetterLogEvery is the least time between two log lines about dead letters of one kind and
	// upstream status; the lines held back in between are counted in the next one. Default a minute.
	DeadLetterLogEvery time.Duration
	// Logger receives the consumer's logs; give it a component key. Nil discards them.
	Logger *slog.Logger
	// Observer, when set, is told of every delivery and outcome.
	Observer Observer
	// Tracer, when set, records a span per delivery of a report (trace.go), continuing the trace of its
	// traceparent header; nil leaves tracing out of the report path altogether.
	Tracer trace.Tracer
	// Sending, when set with Tracer, is handed the body of every report about to be sent upstream and
	// the context of its span, when that span is sampled: the daemon remembers it, so that the span of
	// the event the upstream streams back links to the report's. It is called before the upstream call,
	// since the upstream may stream the event before its answer to the report arrives.
	Sending func(body []byte, span trace.SpanContext)
}

// check reports configuration errors, all at once.
func (c *Config) check() error {
	var errs []error
	for _, f := range []struct{ name, v string }{
		{"Stream", c.Stream}, {"Durable", c.Durable}, {"Subject", c.Subject}, {"DLQSubject", c.DLQSubject},
	} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("consume: %s is empty", f.name))
		}
	}
	if strings.ContainsAny(c.Durable, ".*> \t\r\n") {
		errs = append(errs, fmt.Errorf("consume: durable name %q must not contain '.', '*', '>' or white space", c.Durable))
	}
	if c.DLQSubject != "" && c.DLQSubject == c.Subject {
		errs = append(errs, fmt.Errorf("consume: DLQSubject %q is the reports subject", c.DLQSubject))
	}
	return errors.Join(errs...)
}

// withDefaults returns the configuration with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(c.BackoffMin, DefaultBackoffMax)
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxAge < 0 {
		c.MaxAge = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
