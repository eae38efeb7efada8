// Command bridge connects the Container Logistics Integration API's tracking stream and report operation
// to NATS JetStream.
//
//	bridge run           the daemon, configured by BRIDGE_* environment variables (bridge -h lists them)
//	bridge check-config  validate that configuration and exit, contacting nothing
//	bridge version       version, commit and Go version
//	bridge cursor show|restart  the upstream stream's stored resume point and the lease's holder; make
//	                     the next leader resume after an id or from the beginning (cursor.go)
//	bridge units rebuild [-purge]  build the units view again from the events stream (units.go)
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
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/daemon"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...". Left as they are, the Go
// build information fills them in where it can (see buildVersion).
var (
	version = "dev"
	commit  = "unknown"
)

// buildVersion returns the version and commit to report: those set by -ldflags, else the module version
// and VCS revision the Go toolchain recorded (go install module@version records the version, a build in
// a git checkout the revision), else "dev" and "unknown".
func buildVersion() (v, c string) {
	bi, _ := debug.ReadBuildInfo()
	return versionFrom(version, commit, bi)
}

// versionFrom is buildVersion for the -ldflags values v and c and the build information bi (nil when
// there is none).
func versionFrom(v, c string, bi *debug.BuildInfo) (string, string) {
	if bi == nil {
		return v, c
	}
	if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if c == "unknown" {
		var rev string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			c = rev[:min(len(rev), 12)]
			if modified {
				c += "-dirty"
			}
		}
	}
	return v, c
}

func main() {
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
		if isHelp(args) {
			usage(stdout)
			return 0
		}
		err = runDaemon(ctx, args, stderr)
	case "check-config":
		if isHelp(args) {
			usage(stdout)
			return 0
		}
		err = checkConfig(args, stdout)
	case "cursor":
		if len(args) == 0 || isHelp(args) {
			cursorUsage(stdout)
			return 0
		}
		err = cursorCommand(ctx, args, stdout)
	case "units":
		if len(args) == 0 || isHelp(args) {
			unitsUsage(stdout)
			return 0
		}
		err = unitsCommand(ctx, args, stdout)
	case "version", "-version", "--version":
		v, c := buildVersion()
		fmt.Fprintf(stdout, "tracking-bridge %s (commit %s, %s)\n", v, c, runtime.Version())
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
	var le loggedError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &le):
		return 1
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

// isHelp reports whether args ask for help: -h, -help or --help alone.
func isHelp(args []string) bool {
	if len(args) != 1 {
		return false
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

func usage(w io.Writer) {
	fmt.Fprint(w, `tracking-bridge: the Container Logistics Integration API's tracking events on NATS JetStream.

Usage:
  bridge run            run the bridge (the default), configured from the environment below
  bridge check-config   validate that configuration and exit: 0 when valid, 2 with every problem
                        otherwise (it reads the secret files, and contacts neither NATS nor the upstream)
  bridge version        print version, commit and Go version
  bridge cursor show    print the stored resume point of the upstream stream and the lease's holder
  bridge cursor restart -after ID | -from-beginning
                        make the next leader resume the upstream stream after ID, or from its
                        beginning; safe while bridges run (see 'bridge cursor -h')
  bridge units rebuild [-purge]
                        build the units view PFX_UNITS again from the events stream's first event,
                        while bridges run; -purge empties it first (see 'bridge units -h')
  bridge <command> -h   this text

The demo, the simulator and the benchmark are commands of their own:
  go run ./cmd/demo    embedded NATS + upstream simulator + bridge in one process (no credentials needed)
  go run ./cmd/sim     the upstream simulator alone (-h for its flags)
  go run ./cmd/bench   benchmark the bridge against the reference pipeline (-h)

Configuration of 'bridge run' (environment variables):

`)
	config.Usage(w)
	fmt.Fprint(w, `
'bridge run' uses as many processors as the container's CPU limit allows (Go's default), or GOMAXPROCS
when it is set (see docs/operations.md, Processors).
`)
}

// loadConfig reads and validates the configuration from the environment, the BRIDGE_* variables and
// tracing's OTEL_* ones; every problem of both is a usage error, reported together.
func loadConfig(cmd string, args []string) (*config.Config, config.Tracing, error) {
	if len(args) > 0 {
		return nil, config.Tracing{}, usageError{fmt.Errorf("%s takes no arguments (configuration is in BRIDGE_* variables; see bridge -h)", cmd)}
	}
	cfg, err := config.FromEnv()
	tr, terr := config.TracingFromEnv()
	if err = errors.Join(err, terr); err != nil {
		return nil, config.Tracing{}, usageError{fmt.Errorf("invalid configuration:\n%w", err)}
	}
	return cfg, tr, nil
}

// checkConfig is 'bridge check-config': the configuration 'bridge run' would load, validated the same
// way, without dialling anything.
func checkConfig(args []string, stdout io.Writer) error {
	cfg, tr, err := loadConfig("check-config", args)
	if err != nil {
		return err
	}
	tracing := "off"
	if tr.Enabled {
		tracing = fmt.Sprintf("to %s, sampler %s", logging.RedactURL(tr.TracesURL), tr.Sampler)
		if strings.HasSuffix(tr.Sampler, "traceidratio") {
			tracing += fmt.Sprintf(" %g", tr.Ratio)
		}
	}
	fmt.Fprintf(stdout, "bridge: configuration OK (upstream %s, NATS %s, tracing %s)\n", logging.RedactURL(cfg.UpstreamURL),
		redactedNATS(cfg), tracing)
	return nil
}

// redactedNATS is the configured NATS URLs as the start-up line logs them (user information as xxxxx).
func redactedNATS(cfg *config.Config) string {
	v := cfg.LogValue()
	for _, a := range v.Group() {
		if a.Key == "nats_url" {
			return a.Value.String()
		}
	}
	return ""
}

// runDaemon is 'bridge run'.
func runDaemon(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, tr, err := loadConfig("run", args)
	if err != nil {
		return err
	}
	v, c := buildVersion()
	root := logging.New(stderr, cfg.LogFormat, cfg.SlogLevel())
	log := root.With("component", "main")
	log.Info("starting", "version", v, "commit", c, "gomaxprocs", runtime.GOMAXPROCS(0), "config", cfg)
	if tr.Enabled {
		log.Info("tracing on", "endpoint", logging.RedactURL(tr.TracesURL), "sampler", tr.Sampler, "ratio", tr.Ratio,
			"service", tr.ServiceName)
	}
	d, err := daemon.New(cfg, root, daemon.BuildInfo{Version: v, Commit: c}, daemon.WithTracing(tr))
	if err == nil {
		err = runBounded(ctx, d.Run, cfg.ShutdownTimeout+shutdownGrace)
	}
	if err != nil {
		// In the log's own format, so that a log pipeline keeps the reason the process ended.
		log.Error("stopped with an error", "err", err)
		return loggedError{err}
	}
	log.Info("stopped")
	return nil
}

// loggedError is a failure the logger has already reported: exit code 1, nothing more on stderr.
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

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
