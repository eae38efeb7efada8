// Command bridge connects the Container Logistics Integration API's tracking stream and report operation
// to NATS JetStream.
//
//	bridge run      the daemon, configured by BRIDGE_* environment variables (bridge -h lists them)
//	bridge version  version, commit and Go version
//
// This package is wiring only: it parses the configuration, builds the logger, runs the daemon
// (internal/daemon) and maps the outcome to an exit code. It is the only place that handles signals or
// calls os.Exit. The simulator, the demo and the benchmark are commands of their own (cmd/sim, cmd/demo,
// cmd/bench), so that this binary links none of them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/daemon"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] == "run" {
		setMaxProcs()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// movedCommands names where the commands that used to be part of this binary went.
var movedCommands = map[string]string{
	"sim":   "go run ./cmd/sim",
	"demo":  "go run ./cmd/demo",
	"bench": "go run ./cmd/bench",
}

// run executes one command and returns the exit code: 0 after success or a stop by signal, 2 for a usage
// or configuration error, 1 for any other failure.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = runDaemon(ctx, args, stderr)
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "tracking-bridge %s (commit %s, %s)\n", version, commit, runtime.Version())
		return 0
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	default:
		if moved, ok := movedCommands[cmd]; ok {
			fmt.Fprintf(stderr, "bridge: %q is a command of its own now: %s\n\n", cmd, moved)
		} else {
			fmt.Fprintf(stderr, "bridge: unknown command %q\n\n", cmd)
		}
		usage(stderr)
		return 2
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
}

// usageError is a problem with the command line or the configuration: exit code 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usage(w io.Writer) {
	fmt.Fprint(w, `tracking-bridge: the Container Logistics Integration API's tracking events on NATS JetStream.

Usage:
  bridge run       run the bridge (the default), configured from the environment below
  bridge version   print version, commit and Go version

The demo, the simulator and the benchmark are commands of their own:
  go run ./cmd/demo    embedded NATS + upstream simulator + bridge in one process (no credentials needed)
  go run ./cmd/sim     the upstream simulator alone (-h for its flags)
  go run ./cmd/bench   benchmark the bridge against the reference pipeline (-h)

Configuration of 'bridge run' (environment variables):

`)
	config.Usage(w)
	fmt.Fprint(w, `
'bridge run' uses one processor unless GOMAXPROCS is set (the event path is sequential; see the README).
`)
}

// runDaemon is 'bridge run'.
func runDaemon(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("run takes no arguments (configuration is in BRIDGE_* variables; see bridge -h)")}
	}
	cfg, err := config.LoadFromEnv()
	if err != nil {
		return usageError{fmt.Errorf("invalid configuration:\n%w", err)}
	}
	log := logging.New(stderr, cfg.LogFormat, cfg.SlogLevel())
	log.Info("starting", "version", version, "commit", commit, "gomaxprocs", runtime.GOMAXPROCS(0), "config", cfg)
	d, err := daemon.New(cfg, log, daemon.BuildInfo{Version: version, Commit: commit})
	if err != nil {
		return err
	}
	if err := runBounded(ctx, d.Run, cfg.ShutdownTimeout+shutdownGrace); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// shutdownGrace is what runBounded allows past BRIDGE_SHUTDOWN_TIMEOUT for Run to return by itself.
const shutdownGrace = 2 * time.Second

// runBounded runs f and returns its result, but once ctx is done waits at most stopWithin for it: a
// part stuck where the shutdown timeout cannot reach it (a call that ignores contexts) must not keep the
// process from exiting. Nothing is lost by leaving then: a restart resumes from what JetStream stored.
//
// It lives here rather than in internal/daemon because giving up on a goroutine is only safe when the
// process exits right after, and only main decides that; daemon.Run itself always returns after its
// parts did.
func runBounded(ctx context.Context, f func(context.Context) error, stopWithin time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(stopWithin)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("still stopping %v after the signal (BRIDGE_SHUTDOWN_TIMEOUT plus %v); exiting "+
			"without a clean stop (nothing is lost: the next start resumes from JetStream)", stopWithin, shutdownGrace)
	}
}

// setMaxProcs runs the daemon on one processor unless the GOMAXPROCS variable says otherwise. Only main
// calls it: tests run the daemon inside their own process. The event path is a chain of goroutines
// handing each event on (HTTP body reader, SSE decoder, publisher, NATS flusher, acknowledgement
// handler): on one processor each hand-off is a goroutine switch on the same thread, on several it is
// often a thread wake-up on another core, which costs more (figures in docs/performance.md). The report
// path is network-bound and needs no parallelism either. Set GOMAXPROCS to use more.
func setMaxProcs() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
