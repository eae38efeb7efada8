// Package daemon is the bridge's daemon: it builds the components from the configuration and supervises
// them (the event path under the lease, publish.Events; the report consumer towards the upstream; the API
// service), serves the HTTP endpoints /metrics, /healthz, /readyz and /status, and owns the NATS
// connections (also those of the operator's commands, operator.go). It knows no protocol detail of a
// component: each keeps the contract of internal/component, and the daemon runs them in one group, stops
// them by cancelling its context, and builds /readyz and /status from them (component.go).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/component"
	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
	"github.com/tracking-bridge/tracking-bridge/internal/units"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// BuildInfo identifies the build, for the bridge_build_info metric and /status.
type BuildInfo struct {
	Version string // "dev" when empty
	Commit  string // "unknown" when empty
}

// Daemon is the bridge: the components built from the configuration, run as one group by Run.
type Daemon struct {
	cfg    *config.Config
	log    *slog.Logger // the daemon's own lines (component "daemon")
	info   BuildInfo
	nc     *nats.Conn
	natsSt *natsState // nc's state, readable without its lock
	layout layout.Streams
	// The components (component.Component) besides events, reports and api.
	conn  *natsWatch // the NATS connection
	token *tokens    // the token source
	// events runs the stream into JetStream while this bridge holds the lease (publish.Events).
	events *events
	// reports is the report consumer (tracking.reports → operation reportTrackingEvent).
	reports *reports
	// api is the request-reply service of docs/api.md (P.api.* → the upstream's operations); nil when
	// disabled.
	api *service.Service
	// apiNC is the API service's own NATS connection. Any caller can flood P.api.* faster than a client
	// reads, and the server then cuts the connection as a slow consumer: this one, not the one the
	// events, the lease and the reports travel on.
	apiNC *nats.Conn
	apiSt *natsState // apiNC's state
	// units builds the units view (PFX_UNITS) on a NATS connection of its own, unitsNC, so that its
	// traffic never delays the event path's; nil when BRIDGE_UNITS_VIEW is false.
	units   *unitsView
	unitsNC *nats.Conn
	unitsSt *natsState
	ops     *ops // metrics, health checks and the HTTP endpoint (http.go)
	// parts lists the components, and the streams' check, in /readyz's order (listParts): Run's group,
	// /readyz and /status are built from it.
	parts []part
	// streamsLog is for provisioning the JetStream streams (component "streams").
	streamsLog *slog.Logger
	// tracing exports the parts' spans (off unless configured, WithTracing); Run shuts it down last.
	tracing *tracing.Provider
}

// Option changes how New builds the daemon.
type Option func(*options)

type options struct {
	tracing config.Tracing
}

// WithTracing turns tracing on as t says (config.TracingFromEnv); without it the daemon records no
// span.
func WithTracing(t config.Tracing) Option { return func(o *options) { o.tracing = t } }

// New builds the components. It connects to NATS (in the background if no server is reachable yet)
// but does not contact the upstream. Every component logs to log with its own "component" attribute, so
// log should carry none.
func New(cfg *config.Config, log *slog.Logger, info BuildInfo, opts ...Option) (*Daemon, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	d := &Daemon{cfg: cfg, log: log.With("component", "daemon"), info: info,
		layout: layout.Streams{Prefix: cfg.SubjectPrefix, DuplicateWindow: cfg.DuplicateWindow,
			Replicas: cfg.StreamReplicas, MaxEventBytes: cfg.StreamMaxEventBytes, MaxReportBytes: cfg.ReportMaxBytes,
			EventsLimits:  layout.Limits{MaxBytes: int64(cfg.EventsStreamMaxBytes), MaxAge: cfg.EventsStreamMaxAge},
			ReportsLimits: layout.Limits{MaxBytes: int64(cfg.ReportsStreamMaxBytes), MaxAge: cfg.ReportsStreamMaxAge},
			DLQLimits:     layout.Limits{MaxBytes: int64(cfg.DLQStreamMaxBytes), MaxAge: cfg.DLQStreamMaxAge}},
		streamsLog: log.With("component", "streams")}
	d.ops = newOps(d, log.With("component", "http"))

	apiClient, err := upstream.NewHTTPClient(upstream.ClientOptions{CAFile: cfg.UpstreamCAFile, Timeout: cfg.HTTPTimeout})
	if err != nil {
		return nil, err
	}
	streamClient, err := upstream.NewHTTPClient(upstream.ClientOptions{CAFile: cfg.UpstreamCAFile})
	if err != nil {
		return nil, err
	}
	d.ops.instrument(apiClient, streamClient)
	d.tracing, err = tracing.New(context.Background(), o.tracing, d.ops.reg, log.With("component", "tracing"), info.Version)
	if err != nil {
		return nil, err
	}
	d.ops.trace(d.tracing, apiClient, streamClient)
	d.token = &tokens{}
	d.token.src = upstream.NewTokenSource(upstream.TokenConfig{
		TokenURL:      cfg.TokenURL,
		ClientID:      cfg.ClientID,
		Username:      cfg.Username,
		Password:      cfg.Password.Reveal,
		Client:        apiClient,
		RefreshMargin: cfg.RefreshMargin,
		LoginRetry:    cfg.LoginRetry,
		Logger:        log.With("component", "token"),
		Observe:       d.tokenObserved,
	})

	warnPlainCredentials(cfg, log.With("component", "nats"))
	d.nc, d.natsSt, err = connectNATS(cfg, natsName, log.With("component", "nats"))
	if err != nil {
		return nil, err
	}
	d.conn = &natsWatch{cfg: cfg, nc: d.nc, st: d.natsSt}
	js, err := jetstream.New(d.nc)
	if err != nil {
		d.nc.Close()
		return nil, err
	}
	source := cfg.CESource
	if source == "" {
		source = ceSource(cfg.StreamURL())
	}
	// With tracing on, the span of an event a report of this bridge reported links to the report's span:
	// the report consumer remembers each report it sends upstream, by the event's subject and
	// timestamp (the upstream gives the event an id of its own), and the event path looks it up.
	var reported *tracing.Reported
	var sending func([]byte, trace.SpanContext)
	if d.tracing.Enabled() {
		reported = tracing.NewReported(tracing.DefaultReported)
		prefix := cfg.SubjectPrefix
		sending = func(body []byte, sc trace.SpanContext) {
			if k, ok := publish.ReportedKey(prefix, body); ok {
				reported.Put(k, sc)
			}
		}
	}
	path, err := publish.NewEvents(publish.EventsConfig{
		NC:      d.nc,
		JS:      js,
		Streams: d.layout,
		Stream: upstream.StreamConfig{
			URL:              cfg.StreamURL(),
			Tokens:           d.token.src,
			Client:           streamClient,
			IdleTimeout:      cfg.StreamIdleTimeout,
			MaxEventBytes:    cfg.StreamMaxEventBytes,
			ReconnectMin:     cfg.ReconnectMin,
			ReconnectMax:     cfg.ReconnectMax,
			UnavailableRetry: cfg.UnavailableRetry,
			MaxRetryHint:     cfg.StreamRetryHintMax,
			Logger:           log.With("component", "stream"),
			Tracer:           d.tracing.Tracer("github.com/tracking-bridge/tracking-bridge/internal/upstream"),
		},
		StreamMetrics:   d.ops.metrics.stream,
		Metrics:         d.ops.metrics.publish,
		Window:          cfg.PublishWindow,
		Timeout:         cfg.PublishTimeout,
		Source:          source,
		LeaseTTL:        cfg.LeaseTTL,
		Replicas:        cfg.StreamReplicas,
		ShutdownTimeout: cfg.ShutdownTimeout,
		ReconnectGrace:  2*cfg.ReconnectMin + 2*time.Second,
		Logger:          log,
		Spans:           d.tracing.Roots("github.com/tracking-bridge/tracking-bridge/internal/publish", "send", trace.SpanKindProducer),
		Reported:        reported,
	})
	if err != nil {
		d.nc.Close()
		return nil, err
	}
	d.events = &events{Events: path, bucket: d.layout.Leases(), ttl: cfg.LeaseTTL}
	reportClient := upstream.NewReportClient(upstream.ReportConfig{URL: cfg.ReportURL(), Tokens: d.token.src,
		Client: apiClient, Logger: log.With("component", "report")})
	d.reports = &reports{consume.New(js, reportClient, consume.Config{
		Stream:      d.layout.Reports(),
		Durable:     cfg.ReportDurable,
		Subject:     d.layout.ReportsSubject(),
		DLQSubject:  d.layout.ReportsDLQSubject(),
		DLQStream:   d.layout.DLQ(),
		Concurrency: cfg.ReportConcurrency,
		MaxBytes:    cfg.ReportMaxBytes,
		MaxAge:      cfg.ReportMaxAge,
		BackoffMin:  cfg.ReportBackoffMin,
		BackoffMax:  cfg.ReportBackoffMax,
		AckWait:     max(2*time.Minute, 4*cfg.HTTPTimeout),
		StopTimeout: cfg.ShutdownTimeout,
		Logger:      log.With("component", "reports"),
		Observer:    d.ops.metrics.reports,
		Tracer:      d.tracing.Tracer("github.com/tracking-bridge/tracking-bridge/internal/consume"),
		Sending:     sending,
	})}
	if err := d.newAPI(log); err != nil {
		d.nc.Close()
		return nil, err
	}
	if err := d.newUnits(log); err != nil {
		d.nc.Close()
		if d.apiNC != nil {
			d.apiNC.Close()
		}
		return nil, err
	}
	d.parts = d.listParts()
	d.ops.addChecks(d.parts)
	d.registerMetrics(d.ops.reg)
	return d, nil
}

// listParts lists the bridge's parts in the order /readyz shows their checks; the order also ranks their
// errors when several fail. Every component is here: what is not here does not run.
func (d *Daemon) listParts() []part {
	ps := []part{
		{name: checkNATS, c: d.conn},
		// Provisioned by Run before the components start: checked only.
		{name: checkStreams, check: d.ops.checkStreams},
		{name: checkToken, c: d.token},
		{name: checkStream, c: d.events},
		{name: checkReports, c: d.reports, what: "report consumer"},
	}
	if d.api != nil {
		ps = append(ps, part{name: checkAPI, c: &apiPart{d.api, d.apiSt}}) // its errors name the service
	}
	if d.units != nil {
		// Not a readiness check: see unitsView.
		ps = append(ps, part{name: checkUnits, c: d.units, notReadiness: true})
	}
	return ps
}

// unitsView is the units view (units.View) with its section of /status.
//
// Its state does not take the bridge out of /readyz: the view is a read model rebuilt from the stream at
// any time, while readiness gates what must not stop (a rolling update of the event path, the reports, the
// API). A view that cannot write, or lags, shows in /status, in bridge_units_view_up and
// bridge_units_lag_seconds, and in the alert on them.
type unitsView struct {
	*units.View
	bucket string
	conn   *natsState
}

func (u *unitsView) status(doc *statusDoc) {
	st := u.Status()
	s := &statusUnits{Enabled: true, Bucket: u.bucket, Ready: st.Problem == "", Reason: st.Problem,
		LagEvents: st.LagEvents, LagSeconds: st.LagSeconds, LastAppliedAt: optionalTime(st.LastApplied),
		Events: st.Events, Conflicts: st.Conflicts, Yielding: st.Yielding}
	if why := u.conn.NotConnected(); why != "" {
		s.Ready, s.Reason = false, "the units view's NATS connection: "+why
	}
	doc.Units = s
}

// newUnits builds the units view, on a NATS connection of its own, when BRIDGE_UNITS_VIEW is true.
func (d *Daemon) newUnits(log *slog.Logger) error {
	if !d.cfg.UnitsView {
		return nil
	}
	nc, st, err := connectNATS(d.cfg, natsUnitsName, log.With("component", "nats-units"))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	d.unitsNC, d.unitsSt = nc, st
	d.units = &unitsView{bucket: d.layout.Units(), conn: st, View: units.New(js, units.Config{
		Streams:     d.layout,
		Create:      d.cfg.CreateStreams,
		StopTimeout: d.cfg.ShutdownTimeout,
		Logger:      log.With("component", "units"),
		Metrics:     d.ops.metrics.units,
	})}
	return nil
}

// apiPart is the API service with the readiness of its own NATS connection: a caller's flood can get
// that connection cut as a slow consumer while the service itself is still up.
type apiPart struct {
	*service.Service
	conn *natsState
}

func (a *apiPart) Ready() error {
	if why := a.conn.NotConnected(); why != "" {
		return fmt.Errorf("API service's NATS connection: %s", why)
	}
	return a.Service.Ready()
}

// reports is the report consumer, with its section of /status.
type reports struct{ *consume.Consumer }

func (r *reports) status(doc *statusDoc) { doc.Reports = &statusReports{Pending: r.Pending()} }

// events is the event path under the lease, with its section of /status: the role, the lease and the
// stream.
type events struct {
	*publish.Events
	bucket string        // the lease's bucket
	ttl    time.Duration // BRIDGE_LEASE_TTL
}

func (e *events) status(doc *statusDoc) {
	st := e.Status()
	doc.Stream.State = st.StreamState.String()
	if st.StreamError != nil {
		doc.Stream.LastError = st.StreamError.Error()
	}
	doc.Role = "standby"
	if st.Leading {
		doc.Role = "leader"
	}
	doc.Lease = statusLease{Bucket: e.bucket, TTL: e.ttl.String(),
		Self: statusHolder{Name: st.Self.Name, PID: st.Self.PID, Instance: st.Self.Instance}}
	if h := st.Holder; h != nil {
		doc.Lease.Holder = &statusHolder{Name: h.Name, PID: h.PID, Instance: h.Instance, Epoch: h.Epoch}
	}
	doc.Stream.ResumeAfter = statusID(st.ResumeAfter)
	doc.Stream.LastReceivedID = statusID(st.Activity.LastID)
	doc.Stream.Duplicates = st.Duplicates
	doc.Stream.LastEventAt, doc.Stream.LastBytesAt = optionalTime(st.Activity.LastEvent), optionalTime(st.Activity.LastBytes)
}

// tokenObserved is the token source's Observe hook: the readiness and metrics, and a new token ends
// the report consumer's hold at once, whichever part of the bridge asked for it.
func (d *Daemon) tokenObserved(kind string, err error) {
	d.ops.metrics.upstream.TokenObserved(kind, err)
	d.token.observed(err)
	if err == nil && d.reports != nil {
		d.reports.TokenObtained()
	}
}

// newAPI builds the API service, with an HTTP client of its own: its calls are bounded by their
// context (the caller's deadline), and its connections are not shared with the report consumer's.
func (d *Daemon) newAPI(log *slog.Logger) error {
	if !d.cfg.APIEnabled {
		return nil
	}
	client, err := upstream.NewHTTPClient(upstream.ClientOptions{CAFile: d.cfg.UpstreamCAFile})
	if err != nil {
		return err
	}
	d.ops.instrument(client)
	d.ops.trace(d.tracing, client) // each call a client span inside its request's server span
	nc, st, err := connectNATS(d.cfg, natsAPIName, log.With("component", "nats-api"))
	if err != nil {
		return err
	}
	d.apiNC, d.apiSt = nc, st
	caller := upstream.NewAPIClient(upstream.APIConfig{BaseURL: d.cfg.UpstreamURL, Tokens: d.token.src,
		Client: client, Logger: log.With("component", "api")})
	validator := service.NewOpenAPIValidator(d.cfg.ReportMaxBytes)
	d.api = service.New(d.apiNC, caller, service.Config{
		Prefix:      d.cfg.SubjectPrefix,
		Concurrency: d.cfg.APIConcurrency,
		Timeout:     d.cfg.APITimeout,
		StopTimeout: d.cfg.ShutdownTimeout,
		ReportPath:  d.cfg.ReportPath,
		Validator:   validator,
		Version:     d.info.Version,
		Logger:      log.With("component", "api"),
		Observer:    d.ops.metrics.api,
		Tracer:      d.tracing.Tracer("github.com/tracking-bridge/tracking-bridge/internal/service"),
		// Who may call what (docs/api.md): the endpoints served, the reply subjects answered.
		Endpoints:     d.cfg.APIEndpointList(),
		ReplyPrefixes: d.cfg.APIReplyPrefixList(),
		MaxBody:       d.cfg.APIMaxBodyBytes,
	})
	return nil
}

// ceSource derives the CloudEvents source from the stream URL, without credentials or query.
func ceSource(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "tracking-bridge"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// HTTPAddr returns the address the HTTP endpoint listens on, "" before Run started it.
func (d *Daemon) HTTPAddr() string { return d.ops.httpAddr() }

// Run runs the bridge until ctx is done: its components (the NATS connection, the token source, the
// event stream into JetStream, the report consumer, the API service) in one group. Every component stops
// the same way, when the group's context ends: on ctx, or when one of them returned. Each then stops its
// ingress first (the stream stops reading, the consumer stops fetching, the service stops taking
// requests) and finishes its work in flight within BRIDGE_SHUTDOWN_TIMEOUT counted from that moment;
// once they all returned, Run drains the NATS connections within the same timeout. It returns nil after
// a clean stop, and the reason otherwise (a part failed, or the NATS connection closed for good).
func (d *Daemon) Run(ctx context.Context) error {
	defer d.closeNATS()
	defer func() { // after a failed start; a stop has exported the spans already
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = d.tracing.Shutdown(sctx)
	}()
	stopHTTP, err := d.ops.start(ctx)
	if err != nil {
		return err
	}
	defer stopHTTP()
	if err := d.ensureStreams(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	// rctx is the components' context: it ends on ctx, or when one of them returns. dctx, the drain's
	// deadline, ends BRIDGE_SHUTDOWN_TIMEOUT after it, as each component's own stop clock does.
	rctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	dctx, stopShutdownClock := component.StopClock(rctx, d.cfg.ShutdownTimeout)
	defer stopShutdownClock()
	errs := d.runParts(rctx, stopAll, d.parts)

	if d.nc.IsClosed() {
		// Nothing but drain closes the connection on purpose, and drain comes later. Nothing in flight can
		// be settled; the restart resumes from the stream.
		return natsClosedError(d.cfg, d.nc)
	}
	err = nil
	for _, e := range errs { // the first in the parts' order
		if e != nil {
			err = e
			break
		}
	}

	// The components stopped, their work in flight settled (the lease's stop among it): drain, within the
	// shutdown timeout.
	if d.apiNC != nil {
		if derr := drain(dctx, d.apiNC); derr != nil {
			d.log.Warn("NATS drain of the API connection incomplete", "err", derr)
		}
	}
	if d.unitsNC != nil {
		if derr := drain(dctx, d.unitsNC); derr != nil {
			d.log.Warn("NATS drain of the units view's connection incomplete", "err", derr)
		}
	}
	if derr := drain(dctx, d.nc); derr != nil {
		d.log.Warn("NATS drain incomplete", "err", derr)
	}
	// The spans of everything that stopped are exported last, within the same timeout.
	if terr := d.tracing.Shutdown(dctx); terr != nil {
		d.log.Warn("spans not all exported at stop", "err", terr)
	}
	return err
}

// ErrShutdownTimeout is Run's error when a part was still stopping at BRIDGE_SHUTDOWN_TIMEOUT (the
// components' component.ErrStopTimeout).
var ErrShutdownTimeout = component.ErrStopTimeout

// ensureStreams provisions the streams, retrying while NATS is unreachable or JetStream unavailable.
func (d *Daemon) ensureStreams(ctx context.Context) error {
	js, err := jetstream.New(d.nc)
	if err != nil {
		return err
	}
	log := d.streamsLog
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.layout.Ensure(cctx, js, d.cfg.CreateStreams, log)
		cancel()
		if err == nil {
			return nil
		}
		if !d.cfg.CreateStreams && errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		if d.nc.IsClosed() {
			return natsClosedError(d.cfg, d.nc)
		}
		if attempt == 0 {
			if why := d.natsSt.NotConnected(); why != "" {
				err = fmt.Errorf("%w (NATS %s)", err, why)
			}
			if errors.Is(err, layout.ErrNoRoom) {
				err = fmt.Errorf("%w: lower BRIDGE_EVENTS_STREAM_MAX_BYTES, BRIDGE_REPORTS_STREAM_MAX_BYTES and "+
					"BRIDGE_DLQ_STREAM_MAX_BYTES, or raise the server's max_file_store", err)
			}
			log.Warn("JetStream not ready; retrying", "err", err)
		}
		if !retry.Sleep(ctx, retry.Backoff(500*time.Millisecond, 10*time.Second, attempt)) {
			return ctx.Err()
		}
	}
}

// drain drains the NATS connection and waits for it to close, or for ctx.
func drain(ctx context.Context, nc *nats.Conn) error {
	closed := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(closed)
	if err := nc.Drain(); err != nil {
		return err
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("drain: %w", ctx.Err())
	}
}
