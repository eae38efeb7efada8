package main

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

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/streams"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// bridge is the daemon: the components built from the configuration, run as one group.
type bridge struct {
	cfg    *config.Config
	log    *slog.Logger
	nc     *nats.Conn
	natsSt *natsState // nc's state, readable without its lock
	layout streams.Layout
	tokens *upstream.TokenSource
	stream *upstream.Stream
	pub    *publish.Publisher
	// reports is the report consumer (tracking.reports → op 4.8).
	reports *consume.Consumer
	ops     *ops // metrics, health checks and the HTTP endpoint (httpserver.go)
}

// newBridge builds the components. It connects to NATS (in the background if no server is reachable
// yet) but does not contact the upstream.
func newBridge(cfg *config.Config, log *slog.Logger) (*bridge, error) {
	b := &bridge{cfg: cfg, log: log,
		layout: streams.Layout{Prefix: cfg.SubjectPrefix, DuplicateWindow: cfg.DuplicateWindow}}
	b.ops = newOps(b)

	apiClient, err := upstream.NewHTTPClient(upstream.ClientOptions{CAFile: cfg.UpstreamCAFile, Timeout: cfg.HTTPTimeout})
	if err != nil {
		return nil, err
	}
	streamClient, err := upstream.NewHTTPClient(upstream.ClientOptions{CAFile: cfg.UpstreamCAFile})
	if err != nil {
		return nil, err
	}
	b.ops.instrument(apiClient, streamClient)
	b.tokens = upstream.NewTokenSource(upstream.TokenConfig{
		TokenURL:      cfg.TokenURL,
		ClientID:      cfg.ClientID,
		Username:      cfg.Username,
		Password:      cfg.Password.Reveal,
		Client:        apiClient,
		RefreshMargin: cfg.RefreshMargin,
		LoginRetry:    cfg.LoginRetry,
		Logger:        log.With("component", "token"),
		Observe:       b.ops.tokenObserved,
	})
	b.stream = upstream.NewStream(upstream.StreamConfig{
		URL:              cfg.StreamURL(),
		Tokens:           b.tokens,
		Client:           streamClient,
		IdleTimeout:      cfg.StreamIdleTimeout,
		MaxEventBytes:    cfg.StreamMaxEventBytes,
		ReconnectMin:     cfg.ReconnectMin,
		ReconnectMax:     cfg.ReconnectMax,
		UnavailableRetry: cfg.UnavailableRetry,
		Logger:           log.With("component", "stream"),
		Observer:         b.ops.streamObserver(),
	})

	b.nc, b.natsSt, err = connectNATS(cfg, log.With("component", "nats"))
	if err != nil {
		return nil, err
	}
	source := cfg.CESource
	if source == "" {
		source = ceSource(cfg.StreamURL())
	}
	b.pub, err = publish.New(b.nc, publish.Config{
		Prefix:       cfg.SubjectPrefix,
		EventsStream: b.layout.Events(),
		DLQStream:    b.layout.DLQ(),
		Window:       cfg.PublishWindow,
		Timeout:      cfg.PublishTimeout,
		Source:       source,
		Logger:       log.With("component", "publish"),
		Observer:     b.ops.metrics,
	})
	if err != nil {
		b.nc.Close()
		return nil, err
	}
	js, err := jetstream.New(b.nc)
	if err != nil {
		b.nc.Close()
		return nil, err
	}
	reportClient := upstream.NewReportClient(upstream.ReportConfig{URL: cfg.ReportURL(), Tokens: b.tokens,
		Client: apiClient, Logger: log.With("component", "report")})
	b.reports = consume.New(js, reportClient, consume.Config{
		Stream:      b.layout.Reports(),
		Durable:     cfg.ReportDurable,
		Subject:     b.layout.ReportsSubject(),
		DLQSubject:  b.layout.ReportsDLQSubject(),
		DLQStream:   b.layout.DLQ(),
		Concurrency: cfg.ReportConcurrency,
		MaxBytes:    cfg.ReportMaxBytes,
		MaxAge:      cfg.ReportMaxAge,
		BackoffMin:  cfg.ReportBackoffMin,
		BackoffMax:  cfg.ReportBackoffMax,
		AckWait:     max(2*time.Minute, 4*cfg.HTTPTimeout),
		Logger:      log.With("component", "reports"),
		Observer:    b.ops.reportsObserver(),
	})
	b.ops.watchReports(b.reports)
	return b, nil
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

// Run runs the bridge until ctx is done: the event stream into JetStream and the report consumer towards
// the upstream. On the way out it stops ingress first (the stream stops reading, the consumer stops
// fetching), then waits for in-flight publishes and reports, then drains the NATS connection. It returns
// nil after a clean stop.
func (b *bridge) Run(ctx context.Context) error {
	defer b.nc.Close()
	stopHTTP, err := b.ops.start(ctx)
	if err != nil {
		return err
	}
	defer stopHTTP()
	if err := b.ensureStreams(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	// The two directions run side by side; if one fails, both stop.
	rctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	// The shutdown timeout counts from the moment the bridge starts stopping (a signal, or a part that
	// failed), for everything that follows: the parts winding down, the in-flight publishes, the drain.
	dctx, cancelShutdown := context.WithCancel(context.Background())
	defer cancelShutdown()
	var shutdownTimer *time.Timer
	var timerMu sync.Mutex
	stopShutdownWatch := context.AfterFunc(rctx, func() {
		timerMu.Lock()
		shutdownTimer = time.AfterFunc(b.cfg.ShutdownTimeout, cancelShutdown)
		timerMu.Unlock()
	})
	defer func() {
		stopShutdownWatch()
		timerMu.Lock()
		if shutdownTimer != nil {
			shutdownTimer.Stop()
		}
		timerMu.Unlock()
	}()
	// A connection that closed for good (the server refused the credentials on reconnecting) cannot come
	// back: stop, so that the process exits with the reason and its supervisor restarts it.
	var natsErr error
	closed := b.nc.StatusChanged(nats.CLOSED)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case <-closed:
			natsErr = natsClosedError(b.cfg, b.nc)
			b.log.Error("NATS connection closed for good; stopping", "err", natsErr)
			stopAll()
		case <-rctx.Done():
		}
	}()
	upkeepDone := make(chan struct{})
	go func() {
		defer close(upkeepDone)
		_ = b.pub.Run(rctx) // returns nil when rctx is done
	}()
	reportsDone := make(chan error, 1)
	go func() {
		err := b.reports.Run(rctx)
		if err != nil {
			b.log.Error("report consumer failed", "err", err)
			stopAll()
		}
		reportsDone <- err
	}()
	err = b.stream.Run(rctx, b.pub)
	if err != nil {
		stopAll()
	}
	stopAll()
	// The consumer finishes the reports in flight and hands back those fetched ahead, unless that takes
	// longer than the shutdown timeout (NATS away): what it has not acknowledged is delivered again.
	select {
	case rerr := <-reportsDone:
		if rerr != nil && err == nil {
			err = fmt.Errorf("report consumer: %w", rerr)
		}
	case <-dctx.Done():
		b.log.Warn("report consumer still stopping at the shutdown timeout; its unacknowledged reports are delivered again after the restart")
	}
	<-watchDone
	<-upkeepDone
	b.nc.RemoveStatusListener(closed)
	if natsErr == nil && b.nc.IsClosed() {
		// Closed while the watcher was already leaving (another component stopped on it first), or
		// before it started. Nothing but drain closes the connection on purpose, and drain comes later.
		natsErr = natsClosedError(b.cfg, b.nc)
	}
	if natsErr != nil {
		b.pub.Close()
		return natsErr // nothing in flight can be settled; the restart resumes from the stream
	}

	// Ingress has stopped: finish what is in flight, within the shutdown timeout.
	if _, ferr := b.pub.Resume(dctx); ferr != nil {
		b.log.Warn("stopped with publishes unacknowledged; they are resent after restart", "err", ferr)
	} else {
		b.log.Info("in-flight publishes completed", "resume_after", b.pub.LastResumeID())
	}
	b.pub.Close()
	if derr := drain(dctx, b.nc); derr != nil {
		b.log.Warn("NATS drain incomplete", "err", derr)
	}
	return err
}

// ensureStreams provisions the streams, retrying while NATS is unreachable or JetStream unavailable.
func (b *bridge) ensureStreams(ctx context.Context) error {
	js, err := jetstream.New(b.nc)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := streams.Ensure(cctx, js, b.layout, b.cfg.CreateStreams, b.log.With("component", "streams"))
		cancel()
		if err == nil {
			return nil
		}
		if !b.cfg.CreateStreams && errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		if b.nc.IsClosed() {
			return natsClosedError(b.cfg, b.nc)
		}
		if attempt == 0 {
			b.log.Warn("JetStream not ready; retrying", "err", err)
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
