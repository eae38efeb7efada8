package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/health"
	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Names of the readiness checks, in the order /readyz lists them.
const (
	checkNATS     = "nats"
	checkStreams  = "jetstream_streams"
	checkToken    = "upstream_token"
	checkStream   = "upstream_stream"
	checkReports  = "report_consumer"
	checkLoop     = "loop" // liveness
	streamsTTL    = 2 * time.Second
	httpStopLimit = 5 * time.Second
)

// ops is the bridge's operational side: the metrics registry, the liveness and readiness checks, and the
// HTTP server on BRIDGE_HTTP_ADDR serving /metrics, /healthz, /readyz and /status (status.go). It reads the components'
// state through b; it owns no protocol logic.
type ops struct {
	b       *bridge
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	ready   health.Checks
	live    health.Checks

	// Set by the stream observer: when the last established stream connection ended (unix ns; 0 while
	// none ended yet), for the reconnect grace of the stream check.
	streamDown atomic.Int64
	// The last token request's outcome: its error text (nil after a success), and whether one succeeded.
	tokenErr atomic.Pointer[string]
	tokenOK  atomic.Bool
	// grace is how long the stream may be reconnecting after a connection ended and still count as ready.
	grace time.Duration

	reports atomic.Pointer[consume.Consumer] // the report consumer, once watchReports was called

	running  atomic.Bool // Run's loop is running
	stopping atomic.Bool // ctx is done: shutting down
	addr     atomic.Pointer[string]

	// opByURL maps scheme://host/path of the configured upstream URLs to their operation label.
	opByURL map[string]string
}

// newOps builds the registry, the metrics and the checks of b. It reads b's components lazily, so it may
// be called before they exist.
func newOps(b *bridge) *ops {
	o := &ops{b: b, log: b.log.With("component", "http"), reg: prometheus.NewRegistry()}
	o.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	o.metrics = metrics.New(o.reg, metrics.BuildInfo{Version: version, Commit: commit, GoVersion: runtime.Version()})
	o.grace = 2*b.cfg.ReconnectMin + 2*time.Second

	o.opByURL = map[string]string{}
	for op, raw := range map[string]string{
		"token": b.cfg.TokenURL, "stream": b.cfg.StreamURL(), "report": b.cfg.ReportURL(),
	} {
		if u, err := url.Parse(raw); err == nil {
			o.opByURL[urlKey(u)] = op
		}
	}

	o.ready.Add(checkNATS, o.checkNATS)
	cachedStreams := health.Cached(streamsTTL, o.checkStreams)
	o.ready.Add(checkStreams, func(ctx context.Context) error {
		if st := o.b.natsSt; st == nil || !st.Connected() {
			return errors.New("NATS not connected")
		}
		return cachedStreams(ctx)
	})
	o.ready.Add(checkToken, o.checkToken)
	o.ready.Add(checkStream, o.checkStream)
	o.live.Add(checkLoop, o.checkLoop)
	return o
}

func urlKey(u *url.URL) string { return u.Scheme + "://" + u.Host + u.EscapedPath() }

// instrument wraps the transports of the upstream HTTP clients so that every request is timed in
// bridge_upstream_request_duration_seconds, labelled by operation (matched on the configured URLs).
func (o *ops) instrument(clients ...*http.Client) {
	for _, c := range clients {
		c.Transport = o.metrics.InstrumentTransport(c.Transport, o.operation)
	}
}

func (o *ops) operation(req *http.Request) string {
	if op, ok := o.opByURL[urlKey(req.URL)]; ok {
		return op
	}
	return "other"
}

// tokenObserved is the token source's Observe hook: metrics, and the last error for the token check.
func (o *ops) tokenObserved(kind string, err error) {
	o.metrics.TokenObserved(kind, err)
	o.tokenOK.Store(err == nil)
	if err == nil {
		o.tokenErr.Store(nil)
		return
	}
	msg := err.Error() // the token source's errors carry no secret
	o.tokenErr.Store(&msg)
}

// streamObserver returns the event stream's observer: the metrics, plus the disconnect time for the
// stream check.
func (o *ops) streamObserver() upstream.StreamObserver { return streamObserver{o.metrics, o} }

type streamObserver struct {
	*metrics.Metrics
	o *ops
}

func (s streamObserver) Connected() {
	s.o.streamDown.Store(0)
	s.Metrics.Connected()
}

func (s streamObserver) Disconnected(reason string) {
	s.o.streamDown.Store(time.Now().UnixNano())
	s.Metrics.Disconnected(reason)
}

// reportsObserver is the report consumer's observer (consume.Config.Observer).
func (o *ops) reportsObserver() consume.Observer { return o.metrics }

// watchReports adds the report consumer to readiness (its own Ready) and to the metrics (its Pending).
// Call it after consume.New, before Run.
func (o *ops) watchReports(c *consume.Consumer) {
	o.reports.Store(c)
	o.ready.Add(checkReports, func(context.Context) error {
		if ok, why := c.Ready(); !ok {
			return errors.New(why)
		}
		return nil
	})
}

// checkNATS: the connection is up.
func (o *ops) checkNATS(context.Context) error {
	ns := o.b.natsSt
	if ns == nil {
		return errors.New("not connected yet")
	}
	if st := ns.Status(); st != nats.CONNECTED {
		if err := ns.LastError(); err != "" {
			return fmt.Errorf("connection %s: %s", st, err)
		}
		return fmt.Errorf("connection %s", st)
	}
	return nil
}

// checkStreams: the three JetStream streams exist (asked of JetStream; cached for streamsTTL).
func (o *ops) checkStreams(ctx context.Context) error {
	js, err := jetstream.New(o.b.nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var errs []error
	for _, name := range []string{o.b.layout.Events(), o.b.layout.Reports(), o.b.layout.DLQ()} {
		if _, err := js.Stream(ctx, name); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				errs = append(errs, fmt.Errorf("stream %s does not exist", name))
			} else {
				errs = append(errs, fmt.Errorf("stream %s: %v", name, err))
			}
		}
	}
	return joinLine(errs)
}

// checkToken: the token source holds an unexpired access token, or its last request succeeded. (The
// source refreshes on demand: while the stream stays connected, nothing asks for a token and it may
// expire unused; the next request gets a new one.)
func (o *ops) checkToken(context.Context) error {
	if o.b.tokens != nil && o.b.tokens.Valid() || o.tokenOK.Load() {
		return nil
	}
	if msg := o.tokenErr.Load(); msg != nil {
		return fmt.Errorf("no valid access token: %s", *msg)
	}
	return errors.New("no valid access token yet")
}

// checkStream: the event stream is connected, or reconnecting for less than the grace period after an
// established connection ended.
func (o *ops) checkStream(context.Context) error {
	s := o.b.stream
	if s == nil {
		return errors.New("not started")
	}
	st := s.State()
	switch st {
	case upstream.StateConnected:
		return nil
	case upstream.StateReconnecting:
		if down := o.streamDown.Load(); down != 0 && time.Since(time.Unix(0, down)) < o.grace {
			return nil
		}
	}
	if err := s.LastError(); err != nil {
		return fmt.Errorf("%s: %v", st, err)
	}
	return errors.New(st.String())
}

// checkLoop is the liveness check: the bridge's loop runs and NATS has not given up for good.
func (o *ops) checkLoop(context.Context) error {
	switch {
	case !o.running.Load():
		return errors.New("not running")
	case o.stopping.Load():
		return errors.New("shutting down")
	case o.b.natsSt != nil && o.b.natsSt.Closed():
		return fmt.Errorf("NATS connection closed for good (%s); a restart is needed", o.b.natsSt.LastError())
	}
	return nil
}

// readiness is the metrics' view of the readiness checks.
func (o *ops) readiness() map[string]bool {
	rs := o.ready.Evaluate(context.Background())
	m := make(map[string]bool, len(rs))
	for _, r := range rs {
		m[r.Name] = r.Err == nil
	}
	return m
}

// handler is the HTTP endpoint: /metrics, /healthz, /readyz, /status.
func (o *ops) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{
		Registry:          o.reg,
		EnableOpenMetrics: true,
		Timeout:           10 * time.Second,
	}))
	mux.Handle("/healthz", o.live.Handler())
	mux.Handle("/readyz", o.ready.Handler())
	mux.HandleFunc("GET /status", o.statusHandler)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "tracking-bridge: /metrics /healthz /readyz /status")
	})
	return mux
}

// start listens on BRIDGE_HTTP_ADDR and serves the endpoint until stop is called. The liveness check
// passes from now until ctx is done.
func (o *ops) start(ctx context.Context) (stop func(), err error) {
	b := o.b
	src := metrics.Sources{
		StreamState:    b.stream.State,
		NATSConnected:  b.natsSt.Connected,
		NATSReconnects: b.natsSt.Reconnects,
		Readiness:      o.readiness,
	}
	if c := o.reports.Load(); c != nil {
		src.ReportsPending = c.Pending
	}
	o.metrics.SetSources(src)
	ln, err := net.Listen("tcp", b.cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("BRIDGE_HTTP_ADDR: %w", err)
	}
	addr := ln.Addr().String()
	o.addr.Store(&addr)
	srv := &http.Server{
		Handler:           o.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(o.log.Handler(), slog.LevelWarn),
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.log.Error("HTTP endpoint stopped", "err", err)
		}
	}()
	o.running.Store(true)
	o.stopping.Store(false)
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case <-ctx.Done():
			o.stopping.Store(true)
		case <-stopWatch:
		}
	}()
	o.log.Info("HTTP endpoint listening", "addr", addr, "paths", "/metrics /healthz /readyz")
	return func() {
		o.running.Store(false)
		close(stopWatch)
		<-watchDone
		sctx, cancel := context.WithTimeout(context.Background(), httpStopLimit)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
	}, nil
}

// httpAddr returns the address the endpoint listens on, "" before Run started it.
func (o *ops) httpAddr() string {
	if a := o.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// joinLine joins errors on one line.
func joinLine(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	msg := errs[0].Error()
	for _, e := range errs[1:] {
		msg += "; " + e.Error()
	}
	return errors.New(msg)
}
