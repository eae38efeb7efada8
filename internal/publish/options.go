package publish

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
)

// Observer receives the publisher's outcomes (for metrics). Methods are called under the publisher's lock
// from the goroutine that calls Handle and Resume or from Run's, except Published, Duplicate and
// AckLatency (see there); implementations must be cheap.
type Observer interface {
	// Published is told of an event JetStream stored, with its subject's type token, before the event
	// leaves the window (so before a Resume waiting for it returns). It is called from the
	// acknowledgement subscription's goroutine as the acknowledgement arrives, or from the Handle or Run
	// goroutine for an event sent again after a failure: it must be safe for concurrent use.
	Published(typeToken string)
	// Duplicate is told instead of Published of an event found stored before, which is not stored again:
	// JetStream acknowledged it as a duplicate (the Nats-Msg-Id of an event stored within the duplicate
	// window), or the publisher did not send it because the events stream holds it beyond the resume point
	// (the upstream replays it after a restart or a reconnect). Called as Published is, or from the
	// Handle goroutine.
	Duplicate(typeToken string)
	// AckLatency is told how long an event's acknowledgement took, just before Published or Duplicate and
	// from the same goroutine; traceID is the event's sampled trace (zero when none), for an exemplar.
	AckLatency(d time.Duration, traceID trace.TraceID)
	// Freshness is told, with Published, how long after its own timestamp an event was stored, for an
	// event with an RFC 3339 timestamp. A duplicate has none: its copy was stored before.
	Freshness(d time.Duration)
	// DeadLettered is told of an event sent to P.dlq.events; reason is one of the Reason* constants.
	DeadLettered(reason string)
	PublishRetried(err error)
	// ForeignFenceWrite is told of a message another client than a bridge stored on a fence subject,
	// found when an event checking that subject was refused, or when the markers were stored again.
	ForeignFenceWrite()
}

// Reasons for dead-lettering an event, as passed to Observer.DeadLettered. The set is closed (a metrics
// label).
const (
	ReasonNotJSON    = "not_json"     // the data is not a JSON object
	ReasonOversize   = "oversize"     // over the bounds of one SSE message (BRIDGE_STREAM_MAX_EVENT_BYTES, upstream.MaxLines)
	ReasonMaxPayload = "max_payload"  // larger than the NATS server's max_payload
	ReasonMaxMsgSize = "max_msg_size" // larger than the events stream's max_msg_size
)

// Config configures a Publisher.
type Config struct {
	// Prefix is the subject prefix P of docs/subjects.md ("tracking").
	Prefix string
	// EventsStream is the name of the events stream (PFX_EVENTS), read at start-up for the resume cursor.
	EventsStream string
	// DLQStream is the name of the dead-letter stream (PFX_DLQ), whose max_msg_size bounds dead letters.
	DLQStream string
	// Window is the number of publishes awaiting their acknowledgement at once.
	Window int
	// Timeout bounds the wait for one acknowledgement; a publish that times out is sent again.
	Timeout time.Duration
	// FenceSubject is the base of the events stream's fence subjects (P.leader: Claim stores this leader's
	// markers on P.leader.<n>, see FenceWidth); "" for a publisher that is not fenced (tests, benchmarks).
	FenceSubject string
	// Confirm reads the lease from its bucket and reports whether this process still holds it: a fenced
	// publisher calls it before it claims again a fence subject that another client than a bridge wrote
	// to. Nil: every refusal by the fence ends the term.
	Confirm func(ctx context.Context) (bool, error)
	// Source is the CloudEvents source attribute.
	Source   string
	Logger   *slog.Logger
	Observer Observer
	// Spans, when set, starts a span per event, whose context the event's message carries (trace.go);
	// nil leaves tracing out of the event path altogether.
	Spans *tracing.Roots
	// Reported, when set with Spans, holds the spans of the reports the bridge sent upstream recently:
	// the span of an event that one of them reported links to the report's (ReportedKey).
	Reported *tracing.Reported
}

// withDefaults returns the configuration with its zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Window <= 0 {
		cfg.Window = 1024
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	cfg.Observer = &duplicateLog{Observer: cfg.Observer, log: cfg.Logger}
	return cfg
}

// duplicateLog logs when events start to be found stored before, either way Observer.Duplicate names:
// the upstream replays events stored before, a second bridge publishes the same stream, or the upstream
// reuses ids. It logs once per run of duplicates, not per event.
type duplicateLog struct {
	Observer
	log  *slog.Logger
	dups atomic.Bool // the last event settled was a duplicate
}

// Found-by values of the duplicates' log line.
const (
	foundByJetStream = "JetStream's duplicate window"
	foundByCursor    = "the events stream, beyond the resume point"
)

func (d *duplicateLog) Published(typeToken string) {
	if d.dups.Load() {
		d.dups.Store(false)
	}
	d.Observer.Published(typeToken)
}

func (d *duplicateLog) Duplicate(typeToken string) {
	if !d.dups.Swap(true) {
		d.logRun(typeToken, foundByJetStream, "")
	}
	d.Observer.Duplicate(typeToken)
}

// skipped is told of an event the publisher found stored beyond its resume point and did not send: a
// duplicate as well.
func (d *duplicateLog) skipped(typeToken, id string) {
	if !d.dups.Swap(true) {
		d.logRun(typeToken, foundByCursor, id)
	}
	d.Observer.Duplicate(typeToken)
}

// logRun logs the start of a run of duplicates: the first one's type, where it was found, and its id
// when known (JetStream's acknowledgement does not name it).
func (d *duplicateLog) logRun(typeToken, foundBy, id string) {
	args := []any{"type", typeToken, "found_by", foundBy}
	if id != "" {
		args = append(args, "event_id", id)
	}
	d.log.Warn("events found stored before are not stored again: an upstream replay, another bridge on "+
		"the same stream, or reused ids; they are counted in bridge_events_duplicates_total, not as published",
		args...)
}

// nopObserver is the Observer of a Config without one.
type nopObserver struct{}

func (nopObserver) Published(string)                        {}
func (nopObserver) Duplicate(string)                        {}
func (nopObserver) AckLatency(time.Duration, trace.TraceID) {}
func (nopObserver) Freshness(time.Duration)                 {}
func (nopObserver) DeadLettered(string)                     {}
func (nopObserver) PublishRetried(error)                    {}
func (nopObserver) ForeignFenceWrite()                      {}
