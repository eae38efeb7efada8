// Command bench measures the bridge against a yardstick: throughput, CPU per event and peak RSS over a
// simulator flood, or end-to-end latency at a fixed rate. The yardstick is the repository's own baseline
// pipeline (./cmd/bench/baseline: the least work that moves SSE events into JetStream with the same
// libraries), or an outside program with the same interface named by -refpipe. Each pipeline runs as
// its own process ('bridge run', built from ./cmd/bridge, or the yardstick), fed by a fresh simulator
// (built from ./cmd/sim) and writing to the same nats-server (this command, re-executed with
// -serve-nats). 'go run ./cmd/bench -h' says exactly what each figure means; docs/performance.md has the
// results.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/tracking-bridge/tracking-bridge/internal/embedded"
)

// The targets the benchmark reports on, as ratios bridge/yardstick, and the latency target
// (docs/performance.md).
const (
	benchTargetRate = 1.00 // events/s at least the yardstick's
	benchTargetCPU  = 0.90 // CPU per event at most 0.9× the yardstick's
	benchTargetRSS  = 1.20 // peak RSS at most 1.2× the yardstick's
	benchTargetP99  = 2 * time.Millisecond
	benchRefStream  = "REFPIPE"
	benchRefSubject = "refpipe.events.>"
	benchPoll       = 20 * time.Millisecond
	benchWarmup     = time.Second
)

// benchOptions are the benchmark's flags.
type benchOptions struct {
	n          int
	size       int
	runs       int
	latency    bool
	rate       float64
	duration   time.Duration
	window     int
	refWindow  int
	skipRef    bool
	skipSSE    bool
	skipNATS   bool
	natsTrace  bool
	refpipe    string
	bridgeBin  string
	bridges    []benchBridge // -bridge-bin, parsed
	timeout    time.Duration
	keep       bool
	latencyCSV string
	cpuprofile string
	memprofile string
	cluster    bool
	idle       time.Duration
	units      int // -units-sizing
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runBench(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var ue usageError
	switch {
	case err == nil:
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// usageError is a problem with the command line: exit code 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// runBench measures the bridge against the yardstick on the same simulator flood and the same
// nats-server, each pipeline in its own process so that its CPU time and peak RSS are its own. See
// benchUsage.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o benchOptions
	fs.IntVar(&o.n, "n", 200000, "events per throughput run")
	fs.IntVar(&o.size, "size", 1000, "approximate bytes of an event's data (simulator -size)")
	fs.IntVar(&o.runs, "runs", 3, "runs per pipeline, alternating bridge and yardstick")
	fs.BoolVar(&o.latency, "latency", false, "measure end-to-end latency at -rate for -duration instead of throughput")
	fs.Float64Var(&o.rate, "rate", 2000, "events per second in -latency mode")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of the event sequence in -latency mode")
	fs.IntVar(&o.window, "window", 0, "BRIDGE_PUBLISH_WINDOW of the bridge; 0 keeps the bridge's default")
	fs.IntVar(&o.refWindow, "refpipe-window", 4000, "the yardstick's -window: its publishes awaiting acknowledgement")
	fs.BoolVar(&o.skipRef, "skip-refpipe", false, "measure the bridge only, without a yardstick")
	fs.BoolVar(&o.skipSSE, "skip-sse", false, "in -latency mode, leave out the SSE-only baseline (simulator to an SSE reader in this process)")
	fs.BoolVar(&o.skipNATS, "skip-nats", false, "in -latency mode, leave out the NATS-only baseline (this process publishing to JetStream)")
	fs.BoolVar(&o.natsTrace, "nats-traceparent", false, "in -latency mode, run the NATS-only baseline with a bridge event's headers, without and with a sampled traceparent, alternated: nats-server's own cost of a sampled trace context")
	fs.StringVar(&o.refpipe, "refpipe", "", "an outside yardstick instead of ./cmd/bench/baseline: its source directory (built with go build) or a built binary")
	fs.StringVar(&o.bridgeBin, "bridge-bin", "", "binaries run as 'bridge run', for comparing builds: a comma-separated list of [NAME=]PATH, run in turn in each run; empty builds ./cmd/bridge with go build")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up a run that takes longer")
	fs.StringVar(&o.latencyCSV, "latency-csv", "", "in -latency mode, write each run's per-event latencies to CSV files in this directory")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (child logs, JetStream store)")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "instead of comparing, run the bridge once in this process (over -n events, or with -latency at -rate) and write its CPU profile here")
	fs.StringVar(&o.memprofile, "memprofile", "", "with -cpuprofile: also write the allocation profile here")
	fs.IntVar(&o.units, "units-sizing", 0, "instead of comparing, write this many units (of -size bytes) to a bucket made as the bridge makes PFX_UNITS, twice, and report its size and nats-server's memory")
	fs.BoolVar(&o.cluster, "cluster", false, "run JetStream as a 3-node cluster (routes on loopback) with the bridge's streams and lease bucket at 3 replicas; measures the bridge only")
	fs.DurationVar(&o.idle, "idle", 0, "instead of throughput, measure each bridge's RSS this long after /readyz first answered 200, the simulator at 5 events/s")
	serveNATS := fs.String("serve-nats", "", "internal: only run a JetStream server storing in this directory (the benchmark starts itself this way)")
	natsAddr := fs.String("nats-addr", "127.0.0.1:4222", "internal: listen address for -serve-nats")
	natsPeers := fs.String("nats-peers", "", "internal: with -serve-nats, the client addresses of two more cluster nodes")
	natsRoutes := fs.String("nats-routes", "", "internal: with -serve-nats, the three nodes' route addresses")
	fs.Usage = func() { benchUsage(fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("bench takes no arguments, got %q", fs.Args())}
	}
	if *serveNATS != "" {
		return serveBenchNATS(ctx, *serveNATS, *natsAddr, *natsPeers, *natsRoutes)
	}
	if o.idle > 0 || o.units > 0 {
		o.skipRef = true // the yardstick has no idle state: it exits after -n events
	}
	if o.cluster {
		o.skipRef = true // the yardstick makes its own single-replica stream: none on a cluster
	}
	switch {
	case o.n < 2:
		return usageError{errors.New("-n must be at least 2")}
	case o.runs < 1:
		return usageError{errors.New("-runs must be at least 1")}
	case o.size < 1:
		return usageError{errors.New("-size must be positive")}
	case o.latency && (o.rate <= 0 || o.duration <= benchWarmup):
		return usageError{fmt.Errorf("-latency needs -rate > 0 and -duration > %v", benchWarmup)}
	case o.idle < 0:
		return usageError{errors.New("-idle must not be negative")}
	case o.idle > 0 && (o.latency || o.cpuprofile != ""):
		return usageError{errors.New("-idle measures alone: not with -latency or -cpuprofile")}
	case o.window < 0:
		return usageError{errors.New("-window must not be negative")}
	case o.memprofile != "" && o.cpuprofile == "":
		return usageError{errors.New("-memprofile needs -cpuprofile")}
	}
	if o.bridgeBin != "" {
		var err error
		if o.bridges, err = parseBridgeBins(o.bridgeBin); err != nil {
			return usageError{fmt.Errorf("-bridge-bin: %w", err)}
		}
		if o.cpuprofile != "" {
			return usageError{errors.New("-bridge-bin and -cpuprofile exclude each other: the profile is of this build, run in this process")}
		}
	}

	e, err := newBenchEnv(ctx, o, stderr)
	if err != nil {
		return err
	}
	defer e.close()

	fmt.Fprint(stdout, benchMachine())
	switch {
	case o.units > 0:
		err = e.unitsSizing(ctx, stdout, o.units, o.size)
	case o.cpuprofile != "":
		err = e.profile(ctx, stdout)
	case o.idle > 0:
		err = e.idleRuns(ctx, stdout)
	case o.latency:
		err = e.latencyRuns(ctx, stdout)
	default:
		err = e.throughputRuns(ctx, stdout)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted")
		return nil
	}
	if m, merr := ReadMem(os.Getpid()); merr == nil {
		fmt.Fprintf(stdout, "this process's peak RSS %.1f MB (a child's ru_maxrss is at least this process's RSS peak at its start)\n",
			benchMB(m.PeakRSS))
	}
	fmt.Fprintf(stdout, "load average at the end: %s\n", benchLoadAvg())
	return err
}

// benchBridge is a bridge binary under test and its name in the output.
type benchBridge struct{ name, bin string }

// parseBridgeBins parses -bridge-bin: a comma-separated list of [NAME=]PATH. A single binary without a
// name is "bridge"; several without names are bridge1, bridge2, ...
func parseBridgeBins(v string) ([]benchBridge, error) {
	parts := strings.Split(v, ",")
	var bs []benchBridge
	seen := map[string]bool{}
	for i, part := range parts {
		name, bin, named := strings.Cut(strings.TrimSpace(part), "=")
		if !named {
			name, bin = "bridge", name
			if len(parts) > 1 {
				name = "bridge" + strconv.Itoa(i+1)
			}
		}
		switch {
		case bin == "":
			return nil, fmt.Errorf("entry %d (%q) names no binary", i+1, part)
		case name == "" || strings.ContainsAny(name, " \t/"):
			return nil, fmt.Errorf("entry %d (%q): a name is one word", i+1, part)
		case name == "baseline" || name == "refpipe" || seen[name]:
			return nil, fmt.Errorf("entry %d (%q): the name %q is taken", i+1, part, name)
		}
		seen[name] = true
		bs = append(bs, benchBridge{name: name, bin: bin})
	}
	return bs, nil
}

func benchUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `Usage: go run ./cmd/bench [flags]

Measures the bridge against a yardstick: by default the baseline of ./cmd/bench/baseline, the least work
that moves SSE events into JetStream with the bridge's libraries (eventsource's decoder, jetstream's
PublishMsgAsync with a window, Nats-Msg-Id), or with -refpipe an outside program with the same interface
(the flags -url -n -nats -token-url -user -pass -client-id -window; the stream REFPIPE on
refpipe.events.<type>; a RESULT line; see 'go doc ./cmd/bench/baseline'). Each run starts a fresh
simulator in flood mode ('sim -rate -1 -limit N -size S') and one pipeline as a child process, 'bridge
run' or the yardstick, both writing to the same nats-server (a child process, JetStream file storage,
duplicate window 2m) until N events are stored. Runs alternate: bridge, yardstick, bridge, ... The
simulator, the bridge and the baseline are built from ./cmd/sim, ./cmd/bridge and ./cmd/bench/baseline
with 'go build' into the temporary directory (run it from the repository), unless -bridge-bin names
bridge binaries. With several (-bridge-bin old=/tmp/bridge-old,new=/tmp/bridge-new), each run has one
run of each, in the order given, then the yardstick's; the summary compares each with the yardstick, and
each with the first.

  events/s      (N-1) / (time between the first and the last message's JetStream storage timestamps)
  CPU µs/event  the pipeline process's user+system CPU over its whole life (rusage at exit: start-up,
                the N events, shutdown), divided by N
  peak RSS      the process's VmHWM, read from /proc every 50 ms while it runs (ru_maxrss is shown
                too, but on Linux it includes the benchmark's own RSS at the fork)
The bridge is stopped with SIGTERM as soon as N events are stored; the yardstick exits by itself.

With -latency the simulator generates -rate events/s for -duration; a core NATS subscriber in this
process computes receive time minus the event's "timestamp" (its generation time), leaving out the first
second. After the pipelines' runs, as many runs of two baselines that split the path in its two hops:
SSE-only, this process reading the simulator's stream itself (no NATS), and NATS-only, this process
publishing events of the same size at -rate to a JetStream stream (file storage, Nats-Msg-Id,
asynchronously, no HTTP) and timing them at the same kind of subscriber.

With -idle D each bridge runs against a simulator at 5 events/s, and its RSS (VmRSS, split into
anonymous memory and the binary's mapped pages) is read D after its /readyz first answered 200; no
yardstick.

With -cpuprofile the bridge runs once inside this process (the simulator and nats-server still in their
own) under the CPU profiler: over a flood of -n events, or with -latency at -rate for -duration.

Flags:
`)
	fs.PrintDefaults()
}

// serveBenchNATS is the nats-server child: an embedded server with JetStream until ctx is done.
func serveBenchNATS(ctx context.Context, dir, addr, peers, routes string) error {
	addrs := []string{addr}
	if peers != "" {
		addrs = append(addrs, strings.Split(peers, ",")...)
	}
	var routeAddrs []string
	if routes != "" {
		routeAddrs = strings.Split(routes, ",")
	}
	if len(addrs) > 1 && len(routeAddrs) != len(addrs) {
		return usageError{errors.New("-nats-routes needs one address per node")}
	}
	var nodes []*server.Server
	defer func() {
		for _, ns := range nodes {
			ns.Shutdown()
			ns.WaitForShutdown()
		}
	}()
	for i, a := range addrs {
		port, err := benchPort(a)
		if err != nil {
			return usageError{fmt.Errorf("-nats-addr/-nats-peers: %w", err)}
		}
		o := embedded.Options{StoreDir: dir, Port: port}
		if len(addrs) > 1 {
			o.StoreDir = filepath.Join(dir, fmt.Sprintf("n%d", i+1))
			o.Configure = benchClusterNode(i, routeAddrs)
		}
		ns, err := embedded.Start(o)
		if err != nil {
			return err
		}
		nodes = append(nodes, ns)
	}
	<-ctx.Done()
	return nil
}

// benchClusterNode configures node i of the benchmark's cluster, routed to every node's route address.
func benchClusterNode(i int, routes []string) func(*server.Options) {
	return func(o *server.Options) {
		port, _ := benchPort(routes[i])
		o.ServerName = fmt.Sprintf("n%d", i+1)
		o.Cluster = server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: port}
		for j, r := range routes {
			if j != i {
				o.Routes = append(o.Routes, &url.URL{Scheme: "nats", Host: r})
			}
		}
	}
}

func benchPort(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}
