// Package bridgetest runs a whole tracking-bridge inside a test or a runnable example: an embedded
// nats-server with JetStream, the upstream simulator over HTTP on loopback, and the daemon between them,
// configured in Go from config.Default as 'go run ./cmd/demo' does. The tests and examples of package
// tracking and of the example programs use it; production code never imports it.
package bridgetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/daemon"
	"github.com/tracking-bridge/tracking-bridge/internal/embedded"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// User and Password are the simulator's account the bridge logs in with.
const (
	User     = "demo"
	Password = "demo"
)

// Options configures a Bridge.
type Options struct {
	// Sim configures the simulator; its Users default to User/Password, and its EventRate of 0 generates
	// no events (Sim().Inject adds some).
	Sim sim.Options
	// Configure, when set, adjusts the bridge's configuration (config.Config's fields) before it is
	// validated.
	Configure func(*config.Config)
	// NATS adjusts the nats-server's options (a smaller max_payload, say).
	NATS func(*server.Options)
	// Log receives the bridge's logs (JSON, debug level); nil discards them.
	Log io.Writer
	// Tracing turns the bridge's tracing on (a testutil.OTLPReceiver's URL as TracesURL, say).
	Tracing config.Tracing
}

// Bridge is a running bridge with its NATS server and upstream.
type Bridge struct {
	// NATSURL is the nats-server's client URL.
	NATSURL string
	// Prefix is the bridge's subject prefix.
	Prefix string
	sim    *sim.Server
	d      *daemon.Daemon
	stops  []func()
	done   chan error
	cancel context.CancelFunc
}

// Sim returns the simulator the bridge calls.
func (b *Bridge) Sim() *sim.Server { return b.sim }

// HTTPAddr returns the address of the bridge's HTTP endpoint (/metrics, /healthz, /readyz, /status), on
// loopback with a port of its own.
func (b *Bridge) HTTPAddr() string { return b.d.HTTPAddr() }

// Start runs a bridge until the test ends, and fails the test when it cannot. Without Options.Log, the
// bridge's logs are shown when the test fails.
func Start(tb testing.TB, o Options) *Bridge {
	tb.Helper()
	var logs *testutil.Buffer
	if o.Log == nil {
		logs = &testutil.Buffer{}
		o.Log = logs
	}
	b, err := Launch(o)
	if err != nil {
		if logs != nil {
			tb.Logf("bridge logs:\n%s", logs.String())
		}
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := b.Stop(); err != nil {
			tb.Errorf("bridge: %v", err)
		}
		if logs != nil && tb.Failed() {
			tb.Logf("bridge logs:\n%s", logs.String())
		}
	})
	return b
}

// Launch runs a bridge and returns once it is ready (see waitReady), or fails within 20 seconds. Stop
// ends it.
func Launch(o Options) (b *Bridge, err error) {
	b = &Bridge{done: make(chan error, 1)}
	defer func() {
		if err != nil {
			b.cleanup()
		}
	}()
	dir, err := os.MkdirTemp("", "bridgetest-")
	if err != nil {
		return nil, err
	}
	b.stops = append(b.stops, func() { os.RemoveAll(dir) })
	ns, err := embedded.Start(embedded.Options{StoreDir: dir, Port: -1, Configure: o.NATS})
	if err != nil {
		return nil, err
	}
	b.stops = append(b.stops, func() { ns.Shutdown(); ns.WaitForShutdown() })
	b.NATSURL = ns.ClientURL()

	if o.Sim.Users == nil {
		o.Sim.Users = map[string]string{User: Password}
	}
	b.sim = sim.New(o.Sim)
	up := httptest.NewServer(b.sim.Handler())
	b.stops = append(b.stops, func() { b.sim.Close(); up.CloseClientConnections(); up.Close() })

	cfg := config.Default()
	cfg.UpstreamURL = up.URL + sim.DefaultBasePath
	cfg.TokenURL = up.URL + sim.TokenPath
	cfg.ClientID = sim.DefaultClientID
	cfg.Username, cfg.Password = User, Password
	cfg.InsecureHTTP = true
	cfg.NATSURL = b.NATSURL
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.ReconnectMin, cfg.ReconnectMax = 50*time.Millisecond, 500*time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.LogLevel = "debug"
	if o.Configure != nil {
		o.Configure(cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b.Prefix = cfg.SubjectPrefix
	logs := o.Log
	if logs == nil {
		logs = io.Discard
	}
	d, err := daemon.New(cfg, logging.New(logs, "json", slog.LevelDebug), daemon.BuildInfo{}, daemon.WithTracing(o.Tracing))
	if err != nil {
		return nil, err
	}
	b.d = d
	var ctx context.Context
	ctx, b.cancel = context.WithCancel(context.Background())
	go func() { b.done <- d.Run(ctx) }()
	return b, b.waitReady(cfg, 20*time.Second)
}

// waitReady waits until the bridge's parts are up: the API service answers a ping, the three streams
// and the report consumer exist, and the upstream's event stream is connected. It checks them itself
// rather than polling /readyz, whose stream check caches a failure for 2 s: a poll made in the first
// milliseconds would hold every test 2 s.
func (b *Bridge) waitReady(cfg *config.Config, within time.Duration) error {
	nc, err := nats.Connect(b.NATSURL, nats.Name("bridgetest readiness"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ping := "$SRV.PING." + service.Name
	s := layout.Streams{Prefix: cfg.SubjectPrefix}
	ready := func(ctx context.Context) bool {
		if _, err := nc.RequestWithContext(ctx, ping, nil); err != nil {
			return false
		}
		for _, name := range []string{s.Events(), s.Reports(), s.DLQ()} {
			if _, err := js.Stream(ctx, name); err != nil {
				return false
			}
		}
		if _, err := js.Consumer(ctx, s.Reports(), cfg.ReportDurable); err != nil {
			return false
		}
		return b.sim.Stats().StreamConnects > 0
	}
	deadline := time.Now().Add(within)
	for ; time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-b.done:
			b.cancel = nil
			return fmt.Errorf("bridge stopped before it was ready: %v", err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ok := ready(ctx)
		cancel()
		if ok {
			return nil
		}
	}
	return fmt.Errorf("bridge not ready within %v", within)
}

// Connect opens a client connection to the NATS server.
func (b *Bridge) Connect() (*nats.Conn, error) {
	return nats.Connect(b.NATSURL, nats.Name("bridgetest client"))
}

// Stop stops the bridge and waits for it, then stops the simulator and the NATS server. It returns the
// bridge's error, if any.
func (b *Bridge) Stop() error {
	var err error
	if b.cancel != nil {
		b.cancel()
		b.cancel = nil
		select {
		case err = <-b.done:
		case <-time.After(15 * time.Second):
			err = errors.New("the bridge did not stop within 15s")
		}
	}
	b.cleanup()
	return err
}

func (b *Bridge) cleanup() {
	if b.cancel != nil {
		b.cancel()
		<-b.done
		b.cancel = nil
	}
	for i := len(b.stops) - 1; i >= 0; i-- {
		b.stops[i]()
	}
	b.stops = nil
}
