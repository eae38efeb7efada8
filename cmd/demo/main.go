// Command demo runs an embedded nats-server with JetStream, the upstream simulator and the bridge's
// daemon in one process, and shows the events arriving on NATS by type and loading unit, and every few
// seconds where a few containers are now, from the units view; it also publishes a report every few
// seconds, which the bridge sends upstream and which comes back as an event. Once the bridge
// is up it calls the partner API through NATS (package tracking): a location search, and a booking order
// created and read back. Ctrl-C stops it cleanly. It needs nothing but Go: 'go run ./cmd/demo'.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/daemon"
	"github.com/tracking-bridge/tracking-bridge/internal/embedded"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the demo until ctx is done or its -duration passed, and returns the exit code: 0 after a
// clean stop, 2 for a usage error, 1 for any other failure.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := demoOptions{}
	fs.Float64Var(&o.rate, "rate", 5, "events per second the simulator generates")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long; 0 runs until Ctrl-C")
	fs.IntVar(&o.natsPort, "nats-port", 4222, "port of the embedded NATS server on 127.0.0.1 (0 picks a free one)")
	fs.StringVar(&o.storeDir, "store", "", "JetStream directory; empty means a temporary one, removed at exit")
	fs.BoolVar(&o.quiet, "quiet", false, "print only the summary, not every event")
	fs.DurationVar(&o.reportEvery, "report-every", 5*time.Second, "publish a report on P.reports this often, to show the round trip; 0 never")
	fs.DurationVar(&o.whereEvery, "where-every", 5*time.Second, "print where a few containers are now, from the units view, this often; 0 never")
	fs.StringVar(&o.httpAddr, "http-addr", defaultHTTPAddr, "listen address of the bridge's HTTP endpoint (/status, /readyz, /metrics); "+
		"port 0, or the default when it is taken, picks a free port")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 2
	}
	if err := runDemo(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

// demoOptions are the demo's flags.
type demoOptions struct {
	rate        float64
	duration    time.Duration
	natsPort    int
	storeDir    string
	quiet       bool
	reportEvery time.Duration
	whereEvery  time.Duration
	httpAddr    string
}

// The embedded server's users: the bridge, and the demo's clients (the watcher, its reports and API calls,
// and whoever follows the banner), each in an account of its own.
const (
	demoBridgeUser, demoBridgePassword = "tracking-bridge", "demo-bridge"
	demoClientUser, demoClientPassword = "demo", "demo"
)

// demoAccountsConf sets up the embedded server as deploy/nats/nats-accounts.conf does, in short: the
// bridge in TRACKING with its streams and buckets, its clients in CLIENTS importing the reports, the API
// and its discovery as services (so that JetStream's and the bridge's answers reach them only through
// replies NATS makes) and the events as a stream. A connection without credentials is "operator" in
// TRACKING, as trusted as the bridge: the demo's server listens on loopback only, and the examples and
// the nats CLI keep creating their own consumers there. %[1]s is the subject prefix.
const demoAccountsConf = `no_auth_user: operator
accounts {
  TRACKING {
    jetstream: enabled
    users: [{user: %[2]q, password: %[3]q}, {user: operator, password: ""}]
    exports: [
      {service: "%[1]s.reports"}
      {service: "%[1]s.api.>"}
      {service: "$SRV.>", response_type: stream}
      {stream: "%[1]s.events.>"}
    ]
  }
  CLIENTS {
    users: [{user: %[4]q, password: %[5]q}]
    imports: [
      {service: {account: TRACKING, subject: "%[1]s.reports"}}
      {service: {account: TRACKING, subject: "%[1]s.api.>"}, share: true}
      {service: {account: TRACKING, subject: "$SRV.>"}}
      {stream: {account: TRACKING, subject: "%[1]s.events.>"}}
    ]
  }
}
`

// demoAccounts parses demoAccountsConf with the server's own parser and returns what sets it on the
// embedded server's options.
func demoAccounts(prefix string) (func(*server.Options), error) {
	f, err := os.CreateTemp("", "tracking-bridge-demo-*.conf")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = fmt.Fprintf(f, demoAccountsConf, prefix, demoBridgeUser, demoBridgePassword, demoClientUser, demoClientPassword)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	parsed, err := server.ProcessConfigFile(f.Name())
	if err != nil {
		return nil, fmt.Errorf("the demo's NATS accounts: %w", err)
	}
	return func(o *server.Options) {
		o.Accounts, o.Users, o.NoAuthUser = parsed.Accounts, parsed.Users, parsed.NoAuthUser
	}, nil
}

// runDemo runs NATS, the simulator and the daemon, with a watcher subscribed to the events.
func runDemo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) error {
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	log := logging.New(stderr, "text", slog.LevelInfo)

	// NATS, with JetStream, on loopback.
	dir := o.storeDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "tracking-bridge-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	port := o.natsPort
	if port == 0 || !portFree(port) {
		port = -1
	}
	prefix := config.Default().SubjectPrefix
	accounts, err := demoAccounts(prefix)
	if err != nil {
		return err
	}
	ns, err := embedded.Start(embedded.Options{StoreDir: dir, Port: port, Configure: accounts})
	if err != nil {
		return err
	}
	defer ns.Shutdown()

	// The simulator on a free port.
	s := sim.New(sim.Options{EventRate: o.rate, IDTag: sim.RunTag(), Logger: log.With("process", "sim")})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	simCtx, stopSim := context.WithCancel(context.Background())
	simDone := make(chan error, 1)
	go func() { simDone <- sim.Serve(simCtx, s, ln) }()
	defer func() { stopSim(); <-simDone }()
	base := "http://" + ln.Addr().String()

	// The bridge, configured in Go from the defaults, as bridge run would be with these BRIDGE_* variables.
	cfg := config.Default()
	cfg.UpstreamURL = base + sim.DefaultBasePath
	cfg.TokenURL = base + "/auth/token"
	cfg.ClientID = sim.DefaultClientID
	cfg.Username, cfg.Password = "demo", "demo"
	cfg.InsecureHTTP = true
	cfg.NATSURL = ns.ClientURL()
	cfg.HTTPAddr = httpAddress(o.httpAddr, o.httpAddr == defaultHTTPAddr)
	cfg.LogFormat = "text"
	// Alone in its account (demoAccounts), with its own inboxes apart from any caller's.
	cfg.NATSUser, cfg.NATSPassword = demoBridgeUser, demoBridgePassword
	cfg.NATSInboxPrefix = "_INBOX_bridge"
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo configuration: %w", err)
	}
	// Tracing as the bridge takes it: from the OTEL_* variables (a local collector's
	// OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 shows the events' traces), off without them.
	tr, err := config.TracingFromEnv()
	if err != nil {
		return fmt.Errorf("demo tracing configuration:\n%w", err)
	}
	b, err := daemon.New(cfg, log.With("process", "bridge"), daemon.BuildInfo{}, daemon.WithTracing(tr)) // its parts add "component"
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, `tracking-bridge demo
  NATS (JetStream)  %s
  simulator         %s  (user demo / demo)
  bridge            %s/status  (also /readyz, /metrics)
  watch it yourself nats sub '%s.events.>' --server %s --user %s --password %s
  call the API      nats req %s.api.orders.list '' --server %s --user %s --password %s
  Ctrl-C stops the demo.

`, ns.ClientURL(), base+sim.DefaultBasePath, httpURL(cfg.HTTPAddr), cfg.SubjectPrefix, ns.ClientURL(), demoClientUser,
		demoClientPassword, cfg.SubjectPrefix, ns.ClientURL(), demoClientUser, demoClientPassword)

	w, err := newWatcher(ns.ClientURL(), cfg.SubjectPrefix, stdout, o.quiet)
	if err != nil {
		return err
	}
	defer w.close()

	if o.reportEvery > 0 {
		go w.report(ctx, cfg.SubjectPrefix, s.TrackedOrders("demo"), o.reportEvery)
	}
	go w.callAPI(ctx, cfg.SubjectPrefix)
	if o.whereEvery > 0 {
		go w.whereLoop(ctx, ns.ClientURL(), cfg.SubjectPrefix, o.whereEvery)
	}
	err = b.Run(ctx)
	w.summary()
	return err
}

// demoPlate marks the reports the demo sends, so the watcher recognises them when they come back.
const demoPlate = "DEMO-REPORT-"

// report plays a producer (a gate camera): it publishes a TrackingEventReport to P.reports through
// JetStream, with a Nats-Msg-Id, every interval (tracking.Reporter). The bridge sends it upstream; the
// simulator feeds it into the stream, and it comes back on P.events.GATE_IN.<UNIT>.
func (w *watcher) report(ctx context.Context, prefix string, orders []sim.TrackingOrder, every time.Duration) {
	js, err := jetstream.New(w.nc)
	if err != nil || len(orders) == 0 {
		return
	}
	reporter := tracking.NewReporter(js, prefix)
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		o := orders[n%len(orders)]
		body := fmt.Sprintf(`{"order":{"orderId":%q,"positionId":%q},"event":{"timestamp":%q,"type":"GATE_IN",`+
			`"observation":{"observedMeansOfTransport":{"modeOfTransport":"TRUCK","truck":{"countryCode":"DE",`+
			`"licensePlate":"%s%d","forwarder":"Demo Haulage"}}}},"reporter":{"name":"demo gate camera"}}`,
			o.OrderID, o.PositionID, time.Now().UTC().Format(time.RFC3339), demoPlate, n)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := reporter.ReportJSON(pctx, []byte(body), fmt.Sprintf("demo-camera-%d-%d", os.Getpid(), n))
		cancel()
		if err == nil {
			w.mu.Lock()
			w.reportsSent++
			w.mu.Unlock()
			fmt.Fprintf(w.out, "  ->    report %s%d published on %s (stream %s, seq %d)\n",
				demoPlate, n, tracking.Subjects{Prefix: prefix}.Reports(), r.Stream, r.Sequence)
		}
	}
}

// callAPI plays a downstream service calling the partner API through the bridge (tracking.Client): it
// searches the terminals, books a pick-up at the first and reads the order back, and prints what it got.
// It waits for the bridge's API service to answer, as long as ctx allows.
func (w *watcher) callAPI(ctx context.Context, prefix string) {
	client := tracking.NewClient(w.nc, prefix)
	subject := tracking.Subjects{Prefix: prefix}.API
	var page *tracking.PaginatedLocationResponse
	for {
		var err error
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		page, err = client.SearchLocations(cctx, tracking.SearchLocationsParams{
			Type: new(tracking.LocationTypeADMINISTRATIVETERMINAL), PageSize: new(int32(3))})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, tracking.ErrNoResponders) && !errors.Is(err, tracking.ErrUnavailable) {
			fmt.Fprintf(w.out, "  API   %s failed: %v\n", subject(tracking.OpSearchLocations), err)
			return
		}
		select { // the bridge is still starting
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  API   %s {\"type\":\"ADMINISTRATIVE_TERMINAL\",\"pageSize\":3}\n", subject(tracking.OpSearchLocations))
	if page.Data == nil || len(*page.Data) == 0 {
		fmt.Fprintf(w.out, "%s          no terminal found\n", b.String())
		return
	}
	for _, l := range *page.Data {
		fmt.Fprintf(&b, "          %-8s %s\n", deref(l.Id), l.Designation)
	}
	terminal := deref((*page.Data)[0].Id)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	created, err := client.CreateOrder(cctx, tracking.BookingOrder{
		TerminalId: terminal, Action: tracking.BookingActionPICKUP, Reference: "DEMO-PICKUP-1",
		Unit: tracking.BookingUnit{LoadingState: tracking.LoadingStateFULL, IsoCode: new("22G1")},
	})
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(w.out, "%s  API   %s failed: %v\n", b.String(), subject(tracking.OpCreateOrder), err)
		}
		return
	}
	fmt.Fprintf(&b, "  API   %s: created booking order %s (pick-up at %s)\n", subject(tracking.OpCreateOrder), created.Id, terminal)
	order, err := client.GetOrder(cctx, created.Id)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(w.out, "%s  API   %s failed: %v\n", b.String(), subject(tracking.OpGetOrder), err)
		}
		return
	}
	fmt.Fprintf(&b, "  API   %s {\"id\":%q}: %s at %s, reference %s, unit %s %s\n", subject(tracking.OpGetOrder), created.Id,
		order.Action, order.TerminalId, order.Reference, order.Unit.LoadingState, deref(order.Unit.IsoCode))
	fmt.Fprint(w.out, b.String())
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// watcher is the demo's downstream consumer: a plain NATS subscriber to P.events.> that prints what it
// receives and counts events by type, and notes the first few loading units they name (where.go).
type watcher struct {
	nc     *nats.Conn
	out    io.Writer
	quiet  bool
	mu     sync.Mutex
	counts map[string]int
	total  int
	units  []string // the units whose place whereLoop prints
	// reportsSent and reportsBack count the demo's reports and their return as events.
	reportsSent, reportsBack int
}

func newWatcher(url, prefix string, out io.Writer, quiet bool) (*watcher, error) {
	nc, err := nats.Connect(url, nats.Name("tracking-bridge-demo-watcher"), nats.UserInfo(demoClientUser, demoClientPassword))
	if err != nil {
		return nil, err
	}
	w := &watcher{nc: nc, out: out, quiet: quiet, counts: map[string]int{}}
	base := prefix + ".events."
	_, err = nc.Subscribe(tracking.Subjects{Prefix: prefix}.Events(), func(m *nats.Msg) {
		typ, unit, _ := strings.Cut(strings.TrimPrefix(m.Subject, base), ".") // P.events.<TYPE>.<UNIT>
		w.mu.Lock()
		w.seeUnit(unit)
		w.counts[typ]++
		w.total++
		n := w.total
		back := bytes.Contains(m.Data, []byte(demoPlate))
		if back {
			w.reportsBack++
		}
		w.mu.Unlock()
		if back {
			i := bytes.Index(m.Data, []byte(demoPlate))
			end := i + len(demoPlate)
			for end < len(m.Data) && m.Data[end] >= '0' && m.Data[end] <= '9' {
				end++
			}
			fmt.Fprintf(out, "  <-    report %s came back on %s as %s\n", m.Data[i:end], m.Subject, m.Header.Get("Tracking-Event-Id"))
		}
		if !quiet {
			fmt.Fprintf(out, "%6d  %-18s  %-14s  %-24s  %d bytes\n", n, typ, unit, m.Header.Get("Tracking-Event-Id"), len(m.Data))
		}
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return w, nil
}

func (w *watcher) summary() {
	w.mu.Lock()
	defer w.mu.Unlock()
	types := make([]string, 0, len(w.counts))
	for t := range w.counts {
		types = append(types, t)
	}
	slices.Sort(types)
	fmt.Fprintf(w.out, "\n%d events received on NATS; %d reports published, %d came back as events:\n",
		w.total, w.reportsSent, w.reportsBack)
	for _, t := range types {
		fmt.Fprintf(w.out, "  %-18s %d\n", t, w.counts[t])
	}
}

func (w *watcher) close() { w.nc.Close() }

// defaultHTTPAddr is the bridge's HTTP endpoint in the demo unless -http-addr says otherwise.
const defaultHTTPAddr = "127.0.0.1:8080"

// httpAddress returns the address the bridge's HTTP endpoint is to listen on, with a definite port so
// that the banner can show it: addr itself, or a free port when addr asks for one (port 0) or when addr
// is the default and taken. An address that does not parse is returned as it is, for the configuration
// to report.
func httpAddress(addr string, isDefault bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" && (!isDefault || addrFree(addr)) {
		return addr
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return addr
	}
	defer ln.Close()
	return ln.Addr().String()
}

// httpURL is the URL of the endpoint listening on addr, on loopback when addr is every interface.
func httpURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func portFree(port int) bool { return addrFree(fmt.Sprintf("127.0.0.1:%d", port)) }

func addrFree(addr string) bool {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}
