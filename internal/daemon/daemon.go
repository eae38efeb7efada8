// Package daemon is the bridge's daemon: it builds the components from the configuration and supervises
// them (the event stream into JetStream, the report consumer towards the upstream), serves the HTTP
// endpoints /metrics, /healthz, /readyz and /status, and owns the NATS connection. It knows no protocol
// detail of a component: it wires them, watches their state and stops them in order.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/run"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/streams"
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
	layout streams.Layout
	tokens *upstream.TokenSource
	stream *upstream.Stream
	// events runs the stream into JetStream while this bridge holds the lease (leader.go).
	events *events
	source string       // the CloudEvents source of published events
	pubLog *slog.Logger // the publishers' (component "publish")
	// reports is the report consumer (tracking.reports → op 4.8).
	reports *consume.Consumer
	// api is the request-reply service of contract §7 (P.api.* → ops 4.1–4.8); nil when disabled.
	api *service.Service
	// apiNC is the API service's own NATS connection. Any caller can flood P.api.* faster than a client
	// reads, and the server then cuts the connection as a slow consumer: this one, not the one the
	// events, the lease and the reports travel on.
	apiNC *nats.Conn
	ops   *ops // metrics, health checks and the HTTP endpoint (http.go)
	// streamsLog is for provisioning the JetStream streams (component "streams").
	streamsLog *slog.Logger
}

// New builds the components. It connects to NATS (in the background if no server is reachable yet)
// but does not contact the upstream. Every component logs to log with its own "component" attribute, so
// log should carry none.
func New(cfg *config.Config, log *slog.Logger, info BuildInfo) (*Daemon, error) {
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	d := &Daemon{cfg: cfg, log: log.With("component", "daemon"), info: info,
		layout: streams.Layout{Prefix: cfg.SubjectPrefix, DuplicateWindow: cfg.DuplicateWindow,
			Replicas: cfg.StreamReplicas, MaxEventBytes: cfg.StreamMaxEventBytes, MaxReportBytes: cfg.ReportMaxBytes,
			EventsLimits:  streams.Limits{MaxBytes: int64(cfg.EventsStreamMaxBytes), MaxAge: cfg.EventsStreamMaxAge},
			ReportsLimits: streams.Limits{MaxBytes: int64(cfg.ReportsStreamMaxBytes), MaxAge: cfg.ReportsStreamMaxAge},
			DLQLimits:     streams.Limits{MaxBytes: int64(cfg.DLQStreamMaxBytes), MaxAge: cfg.DLQStreamMaxAge}},
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
	d.tokens = upstream.NewTokenSource(upstream.TokenConfig{
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
	d.stream = upstream.NewStream(upstream.StreamConfig{
		URL:              cfg.StreamURL(),
		Tokens:           d.tokens,
		Client:           streamClient,
		IdleTimeout:      cfg.StreamIdleTimeout,
		MaxEventBytes:    cfg.StreamMaxEventBytes,
		ReconnectMin:     cfg.ReconnectMin,
		ReconnectMax:     cfg.ReconnectMax,
		UnavailableRetry: cfg.UnavailableRetry,
		MaxRetryHint:     cfg.StreamRetryHintMax,
		Logger:           log.With("component", "stream"),
		Observer:         d.ops.streamObserver(),
	})

	warnPlainCredentials(cfg, log.With("component", "nats"))
	d.nc, d.natsSt, err = connectNATS(cfg, natsName, log.With("component", "nats"))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(d.nc)
	if err != nil {
		d.nc.Close()
		return nil, err
	}
	d.source = cfg.CESource
	if d.source == "" {
		d.source = ceSource(cfg.StreamURL())
	}
	d.pubLog = log.With("component", "publish")
	d.events, err = newEvents(d, js, log)
	if err != nil {
		d.nc.Close()
		return nil, err
	}
	reportClient := upstream.NewReportClient(upstream.ReportConfig{URL: cfg.ReportURL(), Tokens: d.tokens,
		Client: apiClient, Logger: log.With("component", "report")})
	d.reports = consume.New(js, reportClient, consume.Config{
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
		Logger:      log.With("component", "reports"),
		Observer:    d.ops.reportsObserver(),
	})
	d.ops.watchReports(d.reports)
	if err := d.newAPI(log); err != nil {
		d.nc.Close()
		return nil, err
	}
	return d, nil
}

// newPublisher returns a publisher of events, fenced on P.leader.>; each term of leadership gets its own.
func (d *Daemon) newPublisher() (*publish.Publisher, error) {
	cfg := d.cfg
	p, err := publish.New(d.nc, publish.Config{
		Prefix:       cfg.SubjectPrefix,
		EventsStream: d.layout.Events(),
		DLQStream:    d.layout.DLQ(),
		FenceSubject: d.layout.FenceSubject(),
		Window:       cfg.PublishWindow,
		Timeout:      cfg.PublishTimeout,
		Source:       d.source,
		Logger:       d.pubLog,
		Observer:     d.ops.metrics,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// tokenObserved is the token source's Observe hook: the health checks and metrics, and a new token ends
// the report consumer's hold at once, whichever part of the bridge asked for it.
func (d *Daemon) tokenObserved(kind string, err error) {
	d.ops.tokenObserved(kind, err)
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
	nc, _, err := connectNATS(d.cfg, natsAPIName, log.With("component", "nats-api"))
	if err != nil {
		return err
	}
	d.apiNC = nc
	// With the bridge's own inbox prefix exactly a reply prefix (nats.go's _INBOX with the default
	// _INBOX.), the service cannot tell a caller's inbox from one of the bridge's, which only their
	// random names protect.
	for _, p := range d.cfg.APIReplyPrefixList() {
		if p == d.cfg.NATSInboxPrefix+"." {
			log.With("component", "api").Warn("the bridge's own inboxes lie under an API reply prefix; set BRIDGE_NATS_INBOX_PREFIX to a "+
				"prefix of its own (e.g. _INBOX_bridge) and let the bridge subscribe only there",
				"inbox_prefix", d.cfg.NATSInboxPrefix, "reply_prefix", p)
		}
	}
	caller := upstream.NewAPIClient(upstream.APIConfig{BaseURL: d.cfg.UpstreamURL, Tokens: d.tokens,
		Client: client, Logger: log.With("component", "api")})
	validator := service.NewOpenAPIValidator(d.cfg.ReportMaxBytes)
	d.api = service.New(d.apiNC, caller, service.Config{
		Prefix:      d.cfg.SubjectPrefix,
		Concurrency: d.cfg.APIConcurrency,
		Timeout:     d.cfg.APITimeout,
		ReportPath:  d.cfg.ReportPath,
		Validator:   validator,
		Version:     d.info.Version,
		Logger:      log.With("component", "api"),
		Observer:    d.ops.metrics,
		// Who may call what (contract §7): the endpoints served, the reply subjects answered.
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

// Run runs the bridge until ctx is done: the event stream into JetStream and the report consumer towards
// the upstream. On the way out it stops ingress first (the stream stops reading, the consumer stops
// fetching), then waits for in-flight publishes and reports, then drains the NATS connection, all within
// BRIDGE_SHUTDOWN_TIMEOUT counted from the moment it starts stopping. It returns nil after a clean stop,
// and the reason otherwise (a part failed, or the NATS connection closed for good).
func (d *Daemon) Run(ctx context.Context) error {
	defer d.nc.Close()
	if d.apiNC != nil {
		defer d.apiNC.Close()
	}
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

	// rctx ends the ingress parts: on ctx, or when one of them returns (then all stop).
	rctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	// dctx bounds the stop: it ends BRIDGE_SHUTDOWN_TIMEOUT after rctx, for everything that follows (the
	// parts winding down, the in-flight publishes, the drain).
	dctx, stopShutdownClock := d.shutdownClock(rctx)
	defer stopShutdownClock()

	var eventsErr, reportsErr, apiErr, natsErr error
	var g run.Group
	// The event stream into JetStream, while this bridge holds the lease. On the way out the lease's
	// holder stops reading, settles its publishes in flight within the shutdown clock, then releases the
	// lease, so that a standby resumes after them at once.
	g.Add(func() error {
		if eventsErr = d.events.run(rctx, dctx); eventsErr != nil {
			d.log.Error("the event path failed; stopping", "err", eventsErr)
		}
		return eventsErr
	}, func(error) { stopAll() })
	// The report consumer. It finishes the reports in flight and hands back those fetched ahead; at the
	// shutdown timeout it hands back those still in flight too, and the stop is an error.
	g.Add(func() error {
		reportsErr = d.runReports(rctx, dctx)
		return reportsErr
	}, func(error) { stopAll() })
	// The API service: it stops taking requests with the ingress, and answers those in flight until
	// the shutdown clock runs out.
	if d.api != nil {
		g.Add(func() error {
			apiErr = d.api.Run(rctx, dctx)
			return apiErr
		}, func(error) { stopAll() })
	}
	// A connection that closed for good (the server refused the credentials on reconnecting) cannot come
	// back: stop, so that the process exits with the reason and its supervisor restarts it.
	closed := d.nc.StatusChanged(nats.CLOSED)
	g.Add(func() error {
		select {
		case <-closed:
			natsErr = natsClosedError(d.cfg, d.nc)
			d.log.Error("NATS connection closed for good; stopping", "err", natsErr)
			return natsErr
		case <-rctx.Done():
			return nil
		}
	}, func(error) { stopAll() })
	_ = g.Run() // the parts' errors are ranked below

	d.nc.RemoveStatusListener(closed)
	if natsErr == nil && d.nc.IsClosed() {
		// Closed while the watcher was already leaving (another part stopped on it first), or before it
		// started. Nothing but drain closes the connection on purpose, and drain comes later.
		natsErr = natsClosedError(d.cfg, d.nc)
	}
	if natsErr != nil {
		return natsErr // nothing in flight can be settled; the restart resumes from the stream
	}
	err = eventsErr
	if reportsErr != nil && err == nil {
		err = fmt.Errorf("report consumer: %w", reportsErr)
	}
	if apiErr != nil && err == nil {
		err = apiErr // it names the service
	}

	// Ingress has stopped and the publishes in flight are settled (the lease's stop): drain, within the
	// shutdown timeout.
	if d.apiNC != nil {
		if derr := drain(dctx, d.apiNC); derr != nil {
			d.log.Warn("NATS drain of the API connection incomplete", "err", derr)
		}
	}
	if derr := drain(dctx, d.nc); derr != nil {
		d.log.Warn("NATS drain incomplete", "err", derr)
	}
	return err
}

// shutdownClock returns a context that ends BRIDGE_SHUTDOWN_TIMEOUT after stopping is done, and a
// function that releases its timer.
func (d *Daemon) shutdownClock(stopping context.Context) (context.Context, func()) {
	dctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var timer *time.Timer
	stopWatch := context.AfterFunc(stopping, func() {
		mu.Lock()
		timer = time.AfterFunc(d.cfg.ShutdownTimeout, cancel)
		mu.Unlock()
	})
	return dctx, func() {
		stopWatch()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// runReports runs the report consumer until rctx is done, and then waits for it until dctx is done. When
// it is still stopping then (reports waiting on a slow upstream), the consumer is aborted: it hands the
// reports in flight back to the stream, so that the next bridge gets them at once rather than after the
// ack wait, and runReports returns an error, for a non-zero exit. It waits at most handBackWait for that;
// beyond, the consumer's goroutine is left behind: the process is on its way out.
func (d *Daemon) runReports(rctx, dctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- d.reports.Run(rctx) }()
	var err error
	select {
	case err = <-done:
	case <-rctx.Done():
		select {
		case err = <-done:
		case <-dctx.Done():
			d.reports.Abort()
			t := time.NewTimer(handBackWait)
			defer t.Stop()
			select {
			case err = <-done:
			case <-t.C:
				err = errors.New("still stopping; its unacknowledged reports are delivered again after the ack wait")
			}
			err = fmt.Errorf("%w (%s): %w", ErrShutdownTimeout, d.cfg.ShutdownTimeout, err)
			d.log.Error("report consumer still stopping at the shutdown timeout", "err", err)
			return err
		}
	}
	if err != nil {
		d.log.Error("report consumer failed", "err", err)
	}
	return err
}

// ErrShutdownTimeout is Run's error when a part was still stopping at BRIDGE_SHUTDOWN_TIMEOUT.
var ErrShutdownTimeout = errors.New("stop timed out after BRIDGE_SHUTDOWN_TIMEOUT")

// handBackWait bounds the wait for an aborted report consumer: its hand-backs are publishes that need no
// answer, and cmd/bridge allows a little time past the shutdown timeout.
const handBackWait = time.Second

// ensureStreams provisions the streams, retrying while NATS is unreachable or JetStream unavailable.
func (d *Daemon) ensureStreams(ctx context.Context) error {
	js, err := jetstream.New(d.nc)
	if err != nil {
		return err
	}
	log := d.streamsLog
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := streams.Ensure(cctx, js, d.layout, d.cfg.CreateStreams, log)
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
			if errors.Is(err, streams.ErrNoRoom) {
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
