package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
)

// ops is the bridge's operational side: the metrics registry, the liveness and readiness checks, and the
// HTTP server on BRIDGE_HTTP_ADDR serving /metrics, /healthz, /readyz and /status (status.go). /readyz
// and /status are built from the parts (addChecks, status); it owns no protocol logic.
type ops struct {
	d       *Daemon
	log     *slog.Logger
	reg     *prometheus.Registry // what /metrics serves: every part's series (metrics.go), the runtime's, the process's
	metrics partMetrics
	ready   healthChecks // the parts' readiness (addChecks)
	live    healthChecks
	// streams is the streams' check, asked of JetStream and cached.
	streams func(context.Context) error
	// streamsSeen is when askStreams last found the three streams (Unix nanoseconds; 0: never).
	streamsSeen atomic.Int64

	running  atomic.Bool // Run's loop is running
	stopping atomic.Bool // ctx is done: shutting down
	addr     atomic.Pointer[string]
	// conns is the endpoint's listener, which bounds its connections.
	conns atomic.Pointer[connLimit]

	// opByURL maps scheme://host/path of the configured upstream URLs to their operation label.
	opByURL map[string]string
}

// newOps builds the registry, the parts' metrics and the liveness check of d; log is the HTTP endpoint's.
// It reads d's components lazily, so it may be called before they exist; the series read from them at
// scrape time are registered once they do (Daemon.registerMetrics).
func newOps(d *Daemon, log *slog.Logger) *ops {
	o := &ops{d: d, log: log, reg: metrics.NewRegistry()}
	o.metrics = newPartMetrics(o.reg)

	o.opByURL = map[string]string{}
	for op, raw := range map[string]string{
		"token": d.cfg.TokenURL, "stream": d.cfg.StreamURL(), "report": d.cfg.ReportURL(),
	} {
		if u, err := url.Parse(raw); err == nil {
			o.opByURL[urlKey(u)] = op
		}
	}

	o.streams = cachedCheck(streamsTTL, o.askStreams)
	o.live.Add(checkLoop, o.checkLoop)
	return o
}

func urlKey(u *url.URL) string { return u.Scheme + "://" + u.Host + u.EscapedPath() }

// instrument wraps the transports of the upstream HTTP clients so that every request is timed in
// bridge_upstream_request_duration_seconds, labelled by operation (matched on the configured URLs).
func (o *ops) instrument(clients ...*http.Client) {
	for _, c := range clients {
		c.Transport = o.metrics.upstream.InstrumentTransport(c.Transport, o.operation)
	}
}

// trace wraps the transports of the upstream HTTP clients so that every request is a client span named
// after its configured URL's path (tracing.Transport), found in opByURL like its metric's operation; a
// request to another URL gets no path. With tracing off it changes nothing.
func (o *ops) trace(p *tracing.Provider, clients ...*http.Client) {
	template := func(req *http.Request) string {
		if _, ok := o.opByURL[urlKey(req.URL)]; ok {
			return req.URL.EscapedPath() // the configured URL's: its key holds the path
		}
		return ""
	}
	for _, c := range clients {
		c.Transport = p.Transport(c.Transport, template)
	}
}

func (o *ops) operation(req *http.Request) string {
	if op, ok := o.opByURL[urlKey(req.URL)]; ok {
		return op
	}
	return "other"
}

// handler is the HTTP endpoint: /metrics, /healthz, /readyz, /status.
func (o *ops) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(o.reg, o.log))
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
	d := o.d
	tcp, err := net.Listen("tcp", d.cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("BRIDGE_HTTP_ADDR: %w", err)
	}
	// Anyone who reaches the port can open connections: each costs at most maxHeaderBytes and a few
	// buffers for at most the timeouts below, and BRIDGE_HTTP_MAX_CONNS of them are open at once
	// (connLimit says why a new one pushes an older one out rather than wait for a free slot).
	ln := newConnLimit(tcp, d.cfg.HTTPMaxConns)
	shedLog := logging.NewLimiter(time.Minute, nil)
	ln.onShed = func() {
		if ok, suppressed := shedLog.Allow("shed"); ok {
			o.log.Warn("HTTP endpoint at its connection limit: closed a connection to make room",
				"max_conns", d.cfg.HTTPMaxConns, "suppressed", suppressed)
		}
	}
	o.conns.Store(ln)
	addr := ln.Addr().String()
	o.addr.Store(&addr)
	srv := &http.Server{
		Handler:           markServing(o.handler()),
		ConnContext:       connContext,
		ConnState:         connState,
		MaxHeaderBytes:    maxHeaderBytes,
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
	o.log.Info("HTTP endpoint listening", "addr", addr, "paths", "/metrics /healthz /readyz /status")
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

// connsShed returns the number of connections the endpoint closed to make room for a new one.
func (o *ops) connsShed() uint64 {
	if ln := o.conns.Load(); ln != nil {
		return ln.shed.Load()
	}
	return 0
}

// httpAddr returns the address the endpoint listens on, "" before Run started it.
func (o *ops) httpAddr() string {
	if a := o.addr.Load(); a != nil {
		return *a
	}
	return ""
}
