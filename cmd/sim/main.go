package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
)

// runSim is 'bridge sim': the upstream simulator alone, for tests, benchmarks and local development.
func runSim(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "listen address")
	logFormat := fs.String("log-format", "text", "log format: json or text")
	opts := sim.Options{EventRate: 5}
	opts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	log := newLogger(stderr, *logFormat, slog.LevelInfo)
	opts.Logger = log.With("component", "sim")
	s := sim.New(opts)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	log.Info("simulator listening", "upstream_url", base+opts.BasePath, "token_url", base+"/auth/token",
		"client_id", opts.ClientID)
	return serveSim(ctx, s, ln)
}

// serveSim serves the simulator on ln until ctx is done.
func serveSim(ctx context.Context, s *sim.Server, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- s.Run(ctx) }()
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("simulator: %w", err)
		}
	}
	s.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}
