// Command sim serves the simulator of the whole upstream API (token endpoint, event stream, report
// operation) for local development, the compose demo and the benchmark. 'sim -h' lists its knobs,
// faults included.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run serves the simulator until ctx is done and returns the exit code: 0 after a stop by signal, 2 for
// a usage error, 1 for any other failure.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "listen address")
	logFormat := fs.String("log-format", "text", "log format: json or text")
	opts := sim.Options{EventRate: 5, IDTag: sim.RunTag()}
	opts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "sim: %v\n", err)
		return 2
	}
	log := logging.New(stderr, *logFormat, slog.LevelInfo)
	opts.Logger = log.With("component", "sim")
	s := sim.New(opts)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "sim: %v\n", err)
		return 1
	}
	base := "http://" + ln.Addr().String()
	log.Info("simulator listening", "upstream_url", base+opts.BasePath, "token_url", base+"/auth/token",
		"client_id", opts.ClientID)
	if err := sim.Serve(ctx, s, ln); err != nil {
		fmt.Fprintf(stderr, "sim: %v\n", err)
		return 1
	}
	return 0
}
