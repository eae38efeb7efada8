// Package metrics holds the bridge's Prometheus metrics. Every name starts with "bridge_" and every label
// has a small, bounded set of values: event types are capped at MaxTypes distinct values (the rest count
// under "other"), HTTP requests are labelled by operation and status code, never by URL or id.
//
// Each component has its own metrics, in a file of its own, handed only to that component as its
// observer: Stream (stream.go) is the event stream's upstream.StreamObserver, Publish (publish.go)
// JetStream publishing's publish.Observer, Tokens (token.go) the token source's Observe hook, Reports
// (reports.go) the report consumer's consume.Observer, API (api.go) the API service's service.Observer.
// Upstream (http.go) times the upstream HTTP clients' requests. Their per-event methods cost a few atomic
// operations and no allocation once a type has been seen.
//
// Values that belong to another component (the stream's state, the consumer's backlog, the NATS
// connection, readiness, the lease) are read at scrape time from the functions in Sources (scrape.go).
//
// The registry is the caller's (registry.go, exposed by text.go's Handler): New registers the bridge's
// metrics on it, RegisterRuntime the Go runtime's and the process's.
package metrics

import (
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Namespace starts every metric name.
const Namespace = "bridge"

// MaxTypes bounds the distinct values of the type label of bridge_events_published_total. Events of
// further types are counted under OtherType.
const MaxTypes = 100

// OtherType is the type label of events beyond the first MaxTypes types.
const OtherType = "other"

// Label values of bounded sets. They are created with value 0 at start-up, so that rate() and
// absent-series alerts work from the first scrape.
var (
	// DisconnectReasons are the reason label values of bridge_stream_disconnects_total.
	DisconnectReasons = []string{upstream.DisconnectEOF, upstream.DisconnectIdle, upstream.DisconnectStatus, upstream.DisconnectError}
	// DeadLetterReasons are the reason label values of bridge_events_dead_lettered_total.
	DeadLetterReasons = []string{publish.ReasonNotJSON, publish.ReasonOversize, publish.ReasonMaxPayload, publish.ReasonMaxMsgSize, "other"}
	// TokenKinds and TokenResults are the labels of bridge_token_requests_total.
	TokenKinds   = []string{"login", "refresh"}
	TokenResults = []string{"ok", "rejected", "unavailable"}
	// ReportOutcomes and StatusClasses are the labels of bridge_reports_outcomes_total.
	ReportOutcomes = []string{"accepted", "retry", "rejected", "invalid", "expired"}
	StatusClasses  = []string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}
	// Operations are the operation label values of bridge_upstream_request_duration_seconds.
	Operations = []string{"token", "stream", "report", "other"}
	// StreamStates are the state label values of bridge_stream_state.
	StreamStates = []upstream.StreamState{upstream.StateStarting, upstream.StateConnected,
		upstream.StateReconnecting, upstream.StateUnavailable, upstream.StateStopped}
)

// Metrics is the bridge's set of metrics: each component's, registered together as the daemon does.
// Hand each part to its component only. Their methods are safe for concurrent use.
type Metrics struct {
	Stream   *Stream   // the event stream's
	Publish  *Publish  // JetStream publishing's
	Tokens   *Tokens   // the token source's
	Reports  *Reports  // the report consumer's
	API      *API      // the API service's
	Upstream *Upstream // the upstream HTTP clients'

	scrape *scrapeSources
}

// BuildInfo is the version information shown by bridge_build_info.
type BuildInfo struct {
	Version, Commit, GoVersion string
}

// New returns the bridge's metrics, registered on reg.
func New(reg *Registry, build BuildInfo) *Metrics {
	reg.Func(Namespace+"_build_info", "Always 1; the labels name the bridge's version, commit and Go version.",
		TypeGauge, []string{"commit", "go_version", "version"}, func(emit func(float64, ...string)) {
			emit(1, build.Commit, build.GoVersion, build.Version)
		})
	return &Metrics{
		Stream:   NewStream(reg),
		Publish:  NewPublish(reg),
		Tokens:   NewTokens(reg),
		Reports:  NewReports(reg),
		API:      NewAPI(reg),
		Upstream: NewUpstream(reg),
		scrape:   newScrape(reg),
	}
}

// SetSources sets the functions read at scrape time. Call it once the components exist.
func (m *Metrics) SetSources(s Sources) { m.scrape.src.Store(&s) }
