package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/launchdarkly/eventsource"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/bench"
	"github.com/tracking-bridge/tracking-bridge/internal/embedded"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
)

// Targets of issue #2, as ratios bridge/refpipe, and the latency target.
const (
	benchTargetRate = 0.90 // events/s at least 0.9× refpipe's
	benchTargetCPU  = 1.15 // CPU per event at most 1.15× refpipe's
	benchTargetRSS  = 1.50 // peak RSS at most 1.5× refpipe's
	benchTargetP99  = 2 * time.Millisecond
	benchRefStream  = "REFPIPE"
	benchRefSubject = "refpipe.events.>"
	benchPoll       = 20 * time.Millisecond
	benchWarmup     = time.Second
)

// benchOptions are the flags of 'bridge bench'.
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
	refpipe    string
	bridgeBin  string
	timeout    time.Duration
	keep       bool
	latencyCSV string
	cpuprofile string
	memprofile string
}

// runBench is 'bridge bench': it measures the bridge against the refpipe yardstick
// (../shared/bench/refpipe) on the same simulator flood and the same nats-server, each pipeline in its own
// process so that its CPU time and peak RSS are its own. See benchUsage.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bridge bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o benchOptions
	fs.IntVar(&o.n, "n", 200000, "events per throughput run")
	fs.IntVar(&o.size, "size", 1000, "approximate bytes of an event's data (simulator -size)")
	fs.IntVar(&o.runs, "runs", 3, "runs per pipeline, alternating bridge and refpipe")
	fs.BoolVar(&o.latency, "latency", false, "measure end-to-end latency at -rate for -duration instead of throughput")
	fs.Float64Var(&o.rate, "rate", 2000, "events per second in -latency mode")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of the event sequence in -latency mode")
	fs.IntVar(&o.window, "window", 0, "BRIDGE_PUBLISH_WINDOW of the bridge; 0 keeps the bridge's default")
	fs.IntVar(&o.refWindow, "refpipe-window", 4000, "refpipe's -window (its own default is 4000)")
	fs.BoolVar(&o.skipRef, "skip-refpipe", false, "measure the bridge only")
	fs.BoolVar(&o.skipSSE, "skip-sse", false, "in -latency mode, leave out the SSE-only baseline (simulator to an SSE reader in this process)")
	fs.BoolVar(&o.skipNATS, "skip-nats", false, "in -latency mode, leave out the NATS-only baseline (this process publishing to JetStream)")
	fs.StringVar(&o.refpipe, "refpipe", "../shared/bench/refpipe", "refpipe source directory (built with go build) or a built binary")
	fs.StringVar(&o.bridgeBin, "bridge-bin", "", "binary run as 'bridge run' (for comparing builds); empty means this one")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up a run that takes longer")
	fs.StringVar(&o.latencyCSV, "latency-csv", "", "in -latency mode, write each run's per-event latencies to CSV files in this directory")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (child logs, JetStream store)")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "instead of comparing, run the bridge once in this process (over -n events, or with -latency at -rate) and write its CPU profile here")
	fs.StringVar(&o.memprofile, "memprofile", "", "with -cpuprofile: also write the allocation profile here")
	serveNATS := fs.String("serve-nats", "", "internal: only run a JetStream server storing in this directory (the benchmark starts itself this way)")
	natsAddr := fs.String("nats-addr", "127.0.0.1:4222", "internal: listen address for -serve-nats")
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
		return serveBenchNATS(ctx, *serveNATS, *natsAddr)
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
	case o.window < 0:
		return usageError{errors.New("-window must not be negative")}
	case o.memprofile != "" && o.cpuprofile == "":
		return usageError{errors.New("-memprofile needs -cpuprofile")}
	}

	e, err := newBenchEnv(ctx, o, stderr)
	if err != nil {
		return err
	}
	defer e.close()

	fmt.Fprint(stdout, benchMachine())
	switch {
	case o.cpuprofile != "":
		err = e.profile(ctx, stdout)
	case o.latency:
		err = e.latencyRuns(ctx, stdout)
	default:
		err = e.throughputRuns(ctx, stdout)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted")
		return nil
	}
	if m, merr := bench.ReadMem(os.Getpid()); merr == nil {
		fmt.Fprintf(stdout, "this process's peak RSS %.1f MB (a child's ru_maxrss is at least this process's RSS peak at its start)\n",
			benchMB(m.PeakRSS))
	}
	fmt.Fprintf(stdout, "load average at the end: %s\n", benchLoadAvg())
	return err
}

func benchUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, `Usage: bridge bench [flags]

Measures the bridge against the refpipe yardstick (../shared/bench/refpipe, built with 'go build'). Each
run starts a fresh simulator in flood mode ('bridge sim -rate -1 -limit N -size S') and one pipeline as a
child process, 'bridge run' or refpipe, both writing to the same nats-server (a child process, JetStream
file storage, duplicate window 2m) until N events are stored. Runs alternate: bridge, refpipe, bridge, ...

  events/s      (N-1) / (time between the first and the last message's JetStream storage timestamps)
  CPU µs/event  the pipeline process's user+system CPU over its whole life (rusage at exit: start-up,
                the N events, shutdown), divided by N
  peak RSS      the process's VmHWM, read from /proc every 50 ms while it runs (ru_maxrss is shown
                too, but on Linux it includes the benchmark's own RSS at the fork)
The bridge is stopped with SIGTERM as soon as N events are stored; refpipe exits by itself.

With -latency the simulator generates -rate events/s for -duration; a core NATS subscriber in this
process computes receive time minus the event's "timestamp" (its generation time), leaving out the first
second. After the pipelines' runs, as many runs of two baselines that split the path in its two hops:
SSE-only, this process reading the simulator's stream itself (no NATS), and NATS-only, this process
publishing events of the same size at -rate to a JetStream stream (file storage, Nats-Msg-Id,
asynchronously, no HTTP) and timing them at the same kind of subscriber.

With -cpuprofile the bridge runs once inside this process (the simulator and nats-server still in their
own) under the CPU profiler: over a flood of -n events, or with -latency at -rate for -duration.

Flags:
`)
	fs.PrintDefaults()
}

// serveBenchNATS is the nats-server child: an embedded server with JetStream until ctx is done.
func serveBenchNATS(ctx context.Context, dir, addr string) error {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError{fmt.Errorf("-nats-addr: %w", err)}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return usageError{fmt.Errorf("-nats-addr: %w", err)}
	}
	ns, err := embedded.Start(embedded.Options{StoreDir: dir, Port: port})
	if err != nil {
		return err
	}
	<-ctx.Done()
	ns.Shutdown()
	ns.WaitForShutdown()
	return nil
}

// benchEnv is what all runs share: the temporary directory, the nats-server child and a connection to it.
type benchEnv struct {
	ctx     context.Context // the benchmark's; cancelled by SIGINT or SIGTERM
	o       benchOptions
	self    string
	dir     string
	log     io.Writer
	natsSrv *bench.Child
	natsURL string
	nc      *nats.Conn
	js      jetstream.JetStream
	refpipe string // refpipe binary; "" with -skip-refpipe
	seq     int
	csvSeq  int
	simSeq  int
}

func newBenchEnv(ctx context.Context, o benchOptions, log io.Writer) (_ *benchEnv, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bridge-bench-")
	if err != nil {
		return nil, err
	}
	e := &benchEnv{ctx: ctx, o: o, self: self, dir: dir, log: log}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if !o.skipRef && o.cpuprofile == "" {
		if e.refpipe, err = buildRefpipe(ctx, o.refpipe, dir); err != nil {
			return nil, err
		}
	}

	addr, err := bench.FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "bench", "-serve-nats", filepath.Join(dir, "jetstream"), "-nats-addr", addr)
	if e.natsSrv, err = e.startChild("nats-server", cmd); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bench.WaitTCP(wctx, addr, e.natsSrv.Done()); err != nil {
		return nil, e.childFailed(e.natsSrv, fmt.Errorf("nats-server not accepting connections: %w", err))
	}
	e.natsURL = "nats://" + addr
	if e.nc, err = nats.Connect(e.natsURL, nats.Name("bridge-bench")); err != nil {
		return nil, err
	}
	if e.js, err = jetstream.New(e.nc); err != nil {
		return nil, err
	}
	for {
		_, err := e.js.AccountInfo(wctx)
		if err == nil {
			break
		}
		if wctx.Err() != nil {
			return nil, fmt.Errorf("JetStream not ready: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(log, "bench: nats-server pid %d at %s, JetStream in %s\n", e.natsSrv.Pid(), e.natsURL, dir)
	return e, nil
}

func (e *benchEnv) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.natsSrv != nil {
		if _, err := e.natsSrv.Stop(10 * time.Second); err != nil && e.ctx.Err() == nil {
			fmt.Fprintf(e.log, "bench: %v\n", err)
		}
	}
	if e.o.keep {
		fmt.Fprintf(e.log, "bench: kept %s\n", e.dir)
		return
	}
	_ = os.RemoveAll(e.dir)
}

// buildRefpipe returns the refpipe binary: src itself when it is a file, else built from the directory.
func buildRefpipe(ctx context.Context, src, dir string) (string, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("refpipe: %w (set -refpipe or -skip-refpipe)", err)
	}
	if !fi.IsDir() {
		return filepath.Abs(src)
	}
	out := filepath.Join(dir, "refpipe")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building refpipe in %s: %w\n%s", src, err, b)
	}
	return out, nil
}

// startChild starts cmd with its output in logs/<name>.log, unless cmd already has a Stdout.
func (e *benchEnv) startChild(name string, cmd *exec.Cmd) (*bench.Child, error) {
	f, err := os.Create(e.logPath(name))
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	if cmd.Stdout == nil {
		cmd.Stdout = f
	}
	cmd.Stderr = f
	return bench.Start(name, cmd)
}

func (e *benchEnv) logPath(name string) string { return filepath.Join(e.dir, "logs", name+".log") }

// childFailed adds the tail of the child's log to err.
func (e *benchEnv) childFailed(c *bench.Child, err error) error {
	b, _ := os.ReadFile(e.logPath(c.Name))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	exit := ""
	if c.Exited() {
		exit = fmt.Sprintf(" (exited: %v)", c.Cmd.ProcessState)
	}
	return fmt.Errorf("%s: %w%s; its log ends:\n  %s", c.Name, err, exit, strings.Join(lines, "\n  "))
}

// benchSim is a running 'bridge sim' child.
type benchSim struct {
	*bench.Child
	base string // http://127.0.0.1:port
}

func (s *benchSim) streamURL() string {
	return s.base + sim.DefaultBasePath + "/tracking/events/stream"
}
func (s *benchSim) tokenURL() string { return s.base + "/auth/token" }

// startSim starts a fresh simulator child: a flood of n events, or rate events/s up to n.
func (e *benchEnv) startSim(ctx context.Context, name string, rate float64, n int) (*benchSim, error) {
	addr, err := bench.FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, e.self, "sim", "-addr", addr, "-log-format", "text",
		"-rate", strconv.FormatFloat(rate, 'f', -1, 64), "-limit", strconv.Itoa(n), "-size", strconv.Itoa(e.o.size))
	c, err := e.startChild(name, cmd)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := bench.WaitTCP(wctx, addr, c.Done()); err != nil {
		c.Kill()
		return nil, e.childFailed(c, fmt.Errorf("simulator not listening: %w", err))
	}
	return &benchSim{Child: c, base: "http://" + addr}, nil
}

func (s *benchSim) stop(log io.Writer) {
	if _, err := s.Stop(10 * time.Second); err != nil && s.Cmd.ProcessState.ExitCode() != -1 {
		fmt.Fprintf(log, "bench: %v\n", err)
	}
}

// bridgeEnv is the environment of a 'bridge run' child: this process's environment without BRIDGE_*
// variables, plus the benchmark's.
func (e *benchEnv) bridgeEnv(s *benchSim, prefix string) ([]string, error) {
	httpAddr, err := bench.FreeAddr()
	if err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.Prefix+"_") {
			env = append(env, kv)
		}
	}
	for k, v := range e.bridgeVars(s, prefix, httpAddr) {
		env = append(env, k+"="+v)
	}
	return env, nil
}

func (e *benchEnv) bridgeVars(s *benchSim, prefix, httpAddr string) map[string]string {
	vars := map[string]string{
		"BRIDGE_UPSTREAM_URL":  s.base + sim.DefaultBasePath,
		"BRIDGE_TOKEN_URL":     s.tokenURL(),
		"BRIDGE_CLIENT_ID":     sim.DefaultClientID,
		"BRIDGE_USERNAME":      "demo",
		"BRIDGE_PASSWORD":      "demo",
		"BRIDGE_INSECURE_HTTP": "true",
		"BRIDGE_NATS_URL":      e.natsURL,
		"BRIDGE_HTTP_ADDR":     httpAddr,
		"BRIDGE_LOG_LEVEL":     "warn",
		// A fresh set of streams per run: the simulator's ids repeat from run to run.
		"BRIDGE_SUBJECT_PREFIX": prefix,
		// refpipe's duplicate window, so that the server's deduplication work is the same.
		"BRIDGE_DUPLICATE_WINDOW": "2m",
	}
	if e.o.window > 0 {
		vars["BRIDGE_PUBLISH_WINDOW"] = strconv.Itoa(e.o.window)
	}
	return vars
}

func (e *benchEnv) startBridge(ctx context.Context, name string, s *benchSim, prefix string) (*bench.Child, error) {
	env, err := e.bridgeEnv(s, prefix)
	if err != nil {
		return nil, err
	}
	bin := e.self
	if e.o.bridgeBin != "" {
		bin = e.o.bridgeBin
	}
	cmd := exec.CommandContext(ctx, bin, "run")
	cmd.Env = env
	return e.startPipeline(name, cmd)
}

// benchRSSInterval is how often a pipeline's VmHWM is read while it runs.
const benchRSSInterval = 50 * time.Millisecond

// startPipeline starts a measured child: like startChild, also tracking its peak RSS.
func (e *benchEnv) startPipeline(name string, cmd *exec.Cmd) (*bench.Child, error) {
	c, err := e.startChild(name, cmd)
	if err == nil {
		c.TrackPeakRSS(benchRSSInterval)
	}
	return c, err
}

func (e *benchEnv) startRefpipe(ctx context.Context, name string, s *benchSim, n int, stdout io.Writer) (*bench.Child, error) {
	cmd := exec.CommandContext(ctx, e.refpipe, "-url", s.streamURL(), "-n", strconv.Itoa(n), "-nats", e.natsURL,
		"-token-url", s.tokenURL(), "-user", "demo", "-pass", "demo", "-client-id", sim.DefaultClientID,
		"-window", strconv.Itoa(e.o.refWindow))
	cmd.Stdout = stdout
	return e.startPipeline(name, cmd)
}

// deleteStreams removes the streams of a run, so that the store does not grow from run to run. It does
// nothing once the benchmark is being cancelled or the server is gone: the store is removed with the
// temporary directory anyway.
func (e *benchEnv) deleteStreams(names ...string) {
	for _, name := range names {
		if e.ctx.Err() != nil || e.natsSrv.Exited() || !e.nc.IsConnected() {
			return
		}
		ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
		err := e.js.DeleteStream(ctx, name)
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			fmt.Fprintf(e.log, "bench: deleting stream %s: %v\n", name, err)
		}
	}
}

func (e *benchEnv) serverCPU() time.Duration {
	st, err := bench.ReadStat(e.natsSrv.Pid())
	if err != nil {
		return 0
	}
	return st.CPU()
}

// benchTPResult is one throughput run.
type benchTPResult struct {
	pipeline  string
	events    uint64
	rate      float64       // store-window events/s
	window    time.Duration // first to last storage timestamp
	e2e       time.Duration // process start to all N stored (as seen by polling)
	cpu       time.Duration // rusage at exit
	startCPU  time.Duration // /proc CPU when the first message was seen stored
	peakRSS   int64         // VmHWM, sampled
	ruMaxRSS  int64         // ru_maxrss (includes this process's peak at the fork; see bench.Usage)
	serverCPU time.Duration // nats-server CPU during the run
	stored    uint64        // bytes the stream holds
	exitCode  int
	self      string // refpipe's own RESULT line
	note      string
}

func (r benchTPResult) cpuPerEvent() float64 {
	return float64(r.cpu.Nanoseconds()) / 1e3 / float64(max(r.events, 1))
}

func (r benchTPResult) String() string {
	s := fmt.Sprintf("%-8s %d events  %.0f events/s (store window %.3f s; %.3f s from process start)  "+
		"CPU %.2f µs/event (%.3f s in all, %.3f s before the first store)  peak RSS %.1f MB (ru_maxrss %.1f)  "+
		"nats-server %.2f µs/event  stored %.0f bytes/event  exit %d",
		r.pipeline, r.events, r.rate, r.window.Seconds(), r.e2e.Seconds(), r.cpuPerEvent(), r.cpu.Seconds(),
		r.startCPU.Seconds(), benchMB(r.peakRSS), benchMB(r.ruMaxRSS), float64(r.serverCPU.Nanoseconds())/1e3/float64(max(r.events, 1)),
		float64(r.stored)/float64(max(r.events, 1)), r.exitCode)
	if r.self != "" {
		s += "\n        own line: " + r.self
	}
	if r.note != "" {
		s += "\n        note: " + r.note
	}
	return s
}

func benchMB(b int64) float64 { return float64(b) / (1 << 20) }

// waitStored polls stream until it holds n messages. It samples the child's CPU time when the first
// message is seen stored. A child that exits is fine if the stream holds n messages afterwards (refpipe
// exits by itself once its publishes are acknowledged).
func (e *benchEnv) waitStored(ctx context.Context, c *bench.Child, stream string, n uint64) (jetstream.StreamState, time.Duration, time.Time, error) {
	var startCPU time.Duration
	errExited := errors.New("exited")
	ctx, cancel := context.WithTimeout(ctx, e.o.timeout)
	defer cancel()
	st, err := bench.WaitStream(ctx, e.js, stream, n, benchPoll, func(st jetstream.StreamState) error {
		if st.Msgs > 0 && startCPU == 0 {
			if ps, err := bench.ReadStat(c.Pid()); err == nil {
				startCPU = ps.CPU()
			}
		}
		if c.Exited() {
			return errExited
		}
		return nil
	})
	if errors.Is(err, errExited) {
		// One more look: the last acknowledgements may have come in just before the exit.
		qctx, qcancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err = bench.StreamState(qctx, e.js, stream)
		qcancel()
		if err == nil && st.Msgs < n {
			err = fmt.Errorf("exited with %d of %d events stored", st.Msgs, n)
		}
	}
	if err != nil {
		return st, startCPU, time.Now(), e.childFailed(c, err)
	}
	return st, startCPU, time.Now(), nil
}

func (e *benchEnv) throughputBridge(ctx context.Context, run int) (benchTPResult, error) {
	e.seq++
	prefix := fmt.Sprintf("bench%d", e.seq)
	layout := publish.Layout{Prefix: prefix}
	defer e.deleteStreams(layout.Events(), layout.Reports(), layout.DLQ())
	r := benchTPResult{pipeline: "bridge"}
	s, err := e.startSim(ctx, fmt.Sprintf("sim-%d-bridge", run), -1, e.o.n)
	if err != nil {
		return r, err
	}
	defer s.stop(e.log)
	srv0 := e.serverCPU()
	c, err := e.startBridge(ctx, fmt.Sprintf("bridge-%d", run), s, prefix)
	if err != nil {
		return r, err
	}
	defer c.Kill()
	st, startCPU, seen, err := e.waitStored(ctx, c, layout.Events(), uint64(e.o.n))
	if err != nil {
		return r, err
	}
	u, err := c.Stop(30 * time.Second)
	if err != nil {
		return r, e.childFailed(c, err)
	}
	r.serverCPU = e.serverCPU() - srv0
	if dlq, err := bench.StreamState(ctx, e.js, layout.DLQ()); err == nil && dlq.Msgs > 0 {
		r.note = fmt.Sprintf("%d messages dead-lettered", dlq.Msgs)
	}
	r.fill(st, startCPU, u, seen.Sub(c.Started))
	return r, nil
}

func (e *benchEnv) throughputRefpipe(ctx context.Context, run int) (benchTPResult, error) {
	e.deleteStreams(benchRefStream) // refpipe re-creates it; make sure no old state is polled
	defer e.deleteStreams(benchRefStream)
	r := benchTPResult{pipeline: "refpipe"}
	s, err := e.startSim(ctx, fmt.Sprintf("sim-%d-refpipe", run), -1, e.o.n)
	if err != nil {
		return r, err
	}
	defer s.stop(e.log)
	srv0 := e.serverCPU()
	var out benchOutput
	c, err := e.startRefpipe(ctx, fmt.Sprintf("refpipe-%d", run), s, e.o.n, &out)
	if err != nil {
		return r, err
	}
	defer c.Kill()
	st, startCPU, seen, err := e.waitStored(ctx, c, benchRefStream, uint64(e.o.n))
	if err != nil {
		return r, err
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	u, err := c.Wait(wctx)
	cancel()
	if err != nil {
		return r, e.childFailed(c, err)
	}
	r.serverCPU = e.serverCPU() - srv0
	r.self = benchResultLine(out.String())
	r.fill(st, startCPU, u, seen.Sub(c.Started))
	return r, nil
}

func (r *benchTPResult) fill(st jetstream.StreamState, startCPU time.Duration, u bench.Usage, e2e time.Duration) {
	r.events = st.Msgs
	r.stored = st.Bytes
	r.rate = bench.Rate(st)
	r.window = st.LastTime.Sub(st.FirstTime)
	r.e2e = e2e
	r.cpu = u.CPU()
	r.startCPU = startCPU
	r.peakRSS = u.PeakRSS
	r.ruMaxRSS = u.MaxRSS
	r.exitCode = u.ExitCode
}

func benchResultLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "RESULT ") {
			return strings.TrimSpace(l)
		}
	}
	return "(no RESULT line)"
}

func (e *benchEnv) throughputRuns(ctx context.Context, stdout io.Writer) error {
	fmt.Fprintf(stdout, "throughput: %d events of ~%d bytes per run, %d run(s) per pipeline, bridge window %s, refpipe window %d\n\n",
		e.o.n, e.o.size, e.o.runs, e.windowDesc(), e.o.refWindow)
	var bridgeRes, refRes []benchTPResult
	for i := 1; i <= e.o.runs; i++ {
		fmt.Fprintf(stdout, "run %d (load %s; %s)\n", i, benchLoadAvg(), benchSpeed())
		r, err := e.throughputBridge(ctx, i)
		if err != nil {
			return fmt.Errorf("bridge run %d: %w", i, err)
		}
		fmt.Fprintf(stdout, "  %v\n", r)
		bridgeRes = append(bridgeRes, r)
		if e.refpipe == "" {
			continue
		}
		r, err = e.throughputRefpipe(ctx, i)
		if err != nil {
			return fmt.Errorf("refpipe run %d: %w", i, err)
		}
		fmt.Fprintf(stdout, "  %v\n", r)
		refRes = append(refRes, r)
	}

	med := func(rs []benchTPResult, f func(benchTPResult) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = f(r)
		}
		return bench.Median(vs)
	}
	rate := func(r benchTPResult) float64 { return r.rate }
	cpu := func(r benchTPResult) float64 { return r.cpuPerEvent() }
	rss := func(r benchTPResult) float64 { return benchMB(r.peakRSS) }
	srv := func(r benchTPResult) float64 {
		return float64(r.serverCPU.Nanoseconds()) / 1e3 / float64(max(r.events, 1))
	}
	fmt.Fprintf(stdout, "\nmedians of %d run(s)\n", e.o.runs)
	fmt.Fprintf(stdout, "  %-9s %12s %14s %13s %22s\n", "pipeline", "events/s", "CPU µs/event", "peak RSS MB", "nats-server µs/event")
	for _, p := range []struct {
		name string
		rs   []benchTPResult
	}{{"bridge", bridgeRes}, {"refpipe", refRes}} {
		if len(p.rs) == 0 {
			continue
		}
		fmt.Fprintf(stdout, "  %-9s %12.0f %14.2f %13.1f %22.2f\n", p.name, med(p.rs, rate), med(p.rs, cpu), med(p.rs, rss), med(p.rs, srv))
	}
	if len(refRes) == 0 {
		return nil
	}
	ratio := func(f func(benchTPResult) float64) float64 { return med(bridgeRes, f) / med(refRes, f) }
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	rr, cr, mr := ratio(rate), ratio(cpu), ratio(rss)
	fmt.Fprintf(stdout, "\nbridge / refpipe (medians)\n")
	fmt.Fprintf(stdout, "  events/s      %.3f   target >= %.2f  %s\n", rr, benchTargetRate, verdict(rr >= benchTargetRate))
	fmt.Fprintf(stdout, "  CPU µs/event  %.3f   target <= %.2f  %s\n", cr, benchTargetCPU, verdict(cr <= benchTargetCPU))
	fmt.Fprintf(stdout, "  peak RSS      %.3f   target <= %.2f  %s\n", mr, benchTargetRSS, verdict(mr <= benchTargetRSS))
	fmt.Fprintf(stdout, "  nats-server   %.3f   (no target: the server's CPU per event caused by each pipeline)\n", ratio(srv))
	return nil
}

func (e *benchEnv) windowDesc() string {
	if e.o.window > 0 {
		return strconv.Itoa(e.o.window)
	}
	return strconv.Itoa(config.Default().PublishWindow) + " (default)"
}

// benchLatResult is one latency run.
type benchLatResult struct {
	pipeline string
	sum      bench.LatencySummary
	cpu      time.Duration // CPU between the first and the last event received
	cpuN     int           // events received in that span
	cpuNote  string
	peakRSS  int64
	self     string
}

func (r benchLatResult) String() string {
	s := r.sum
	out := fmt.Sprintf("%-8s received %d, counted %d (%d in the first %v left out, %d unparsable) over %.2f s:  "+
		"p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (min %s)",
		r.pipeline, s.Received, s.Count, s.Warmup, benchWarmup, s.Bad, s.Generated.Seconds(),
		benchUS(s.P50), benchUS(s.P90), benchUS(s.P99), benchUS(s.P999), benchUS(s.Max), benchUS(s.Min))
	if r.cpuN > 0 {
		out += fmt.Sprintf("\n        CPU %.2f µs/event at this rate (%.3f s from the first event received to the last%s, %d events)",
			float64(r.cpu.Nanoseconds())/1e3/float64(r.cpuN), r.cpu.Seconds(), r.cpuNote, r.cpuN)
	}
	if r.peakRSS > 0 {
		out += fmt.Sprintf("; peak RSS %.1f MB", benchMB(r.peakRSS))
	}
	if r.self != "" {
		out += "\n        own line: " + r.self
	}
	return out
}

func benchUS(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1e3) }

// latencyRun measures one pipeline at the configured rate: start is called with the simulator and must
// start the pipeline; subject is where its events appear.
func (e *benchEnv) latencyRun(ctx context.Context, name, subject string, total int,
	start func(*benchSim) (*bench.Child, error), selfExits bool) (benchLatResult, error) {
	r := benchLatResult{pipeline: name}
	rec := &bench.Recorder{}
	// Its own connection, so that nothing else queues in front of the messages measured.
	nc, err := nats.Connect(e.natsURL, nats.Name("bridge-bench-latency"))
	if err != nil {
		return r, err
	}
	defer nc.Close()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { rec.Record(time.Now(), m.Data) })
	if err != nil {
		return r, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		return r, err
	}

	e.simSeq++
	s, err := e.startSim(ctx, fmt.Sprintf("sim-latency-%s-%d", name, e.simSeq), e.o.rate, total)
	if err != nil {
		return r, err
	}
	defer s.stop(e.log)
	c, err := start(s)
	if err != nil {
		return r, err
	}
	defer c.Kill()

	deadline := time.Now().Add(e.o.duration + e.o.timeout)
	var cpu0, cpu1 time.Duration
	n0, n1 := 0, 0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n := rec.Count()
		if n > 0 && n0 == 0 {
			if ps, err := bench.ReadStat(c.Pid()); err == nil {
				cpu0, n0 = ps.CPU(), n
			}
		}
		if n >= total {
			if ps, err := bench.ReadStat(c.Pid()); err == nil {
				cpu1, n1 = ps.CPU(), n
			}
			break
		}
		if c.Exited() {
			// refpipe exits once its publishes are acknowledged: the last messages may still be on their
			// way to the subscriber.
			time.Sleep(200 * time.Millisecond)
			if rec.Count() >= total {
				continue
			}
			return r, e.childFailed(c, fmt.Errorf("exited after %d of %d events were received", rec.Count(), total))
		}
		if time.Now().After(deadline) {
			return r, e.childFailed(c, fmt.Errorf("only %d of %d events received in time", n, total))
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
	}
	_ = sub.Unsubscribe()
	var u bench.Usage
	if selfExits {
		wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		u, err = c.Wait(wctx)
		cancel()
	} else {
		u, err = c.Stop(30 * time.Second)
	}
	if err != nil {
		return r, e.childFailed(c, err)
	}
	if n0 > 0 {
		if n1 == 0 { // exited before the last event was seen: count up to the exit (includes its shutdown)
			cpu1, n1 = u.CPU(), total
			r.cpuNote = " (to the exit)"
		}
		r.cpu, r.cpuN = cpu1-cpu0, n1-n0
	}
	r.peakRSS = u.PeakRSS
	r.sum = rec.Summarize(benchWarmup)
	return r, e.writeCSV(r.pipeline, rec)
}

func (e *benchEnv) latencyRuns(ctx context.Context, stdout io.Writer) error {
	total := int(e.o.rate * e.o.duration.Seconds())
	fmt.Fprintf(stdout, "latency: %d events of ~%d bytes at %.0f events/s (%v), %d run(s) per pipeline, bridge window %s\n"+
		"  latency = receive time at a core NATS subscriber (SSE-only: at an SSE reader in the bench process)\n  minus the event's \"timestamp\" (when the simulator wrote it)\n\n",
		total, e.o.size, e.o.rate, e.o.duration, e.o.runs, e.windowDesc())
	var bridgeP99, refP99, sseP99, natsP99 []float64
	for i := 1; i <= e.o.runs; i++ {
		fmt.Fprintf(stdout, "run %d (load %s; %s)\n", i, benchLoadAvg(), benchSpeed())
		e.seq++
		prefix := fmt.Sprintf("bench%d", e.seq)
		layout := publish.Layout{Prefix: prefix}
		r, err := e.latencyRun(ctx, "bridge", prefix+".events.>", total, func(s *benchSim) (*bench.Child, error) {
			return e.startBridge(ctx, fmt.Sprintf("bridge-latency-%d", i), s, prefix)
		}, false)
		e.deleteStreams(layout.Events(), layout.Reports(), layout.DLQ())
		if err != nil {
			return fmt.Errorf("bridge latency run %d: %w", i, err)
		}
		fmt.Fprintf(stdout, "  %v\n", r)
		bridgeP99 = append(bridgeP99, float64(r.sum.P99))
		if e.refpipe == "" {
			continue
		}
		var out benchOutput
		e.deleteStreams(benchRefStream)
		r, err = e.latencyRun(ctx, "refpipe", benchRefSubject, total, func(s *benchSim) (*bench.Child, error) {
			return e.startRefpipe(ctx, fmt.Sprintf("refpipe-latency-%d", i), s, total, &out)
		}, true)
		e.deleteStreams(benchRefStream)
		if err != nil {
			return fmt.Errorf("refpipe latency run %d: %w", i, err)
		}
		r.self = benchResultLine(out.String())
		fmt.Fprintf(stdout, "  %v\n", r)
		refP99 = append(refP99, float64(r.sum.P99))
	}
	if !e.o.skipSSE {
		for i := 1; i <= e.o.runs; i++ {
			r, err := e.sseLatency(ctx, total)
			if err != nil {
				return fmt.Errorf("SSE-only latency run %d: %w", i, err)
			}
			fmt.Fprintf(stdout, "  %v\n", r)
			sseP99 = append(sseP99, float64(r.sum.P99))
		}
	}
	if !e.o.skipNATS {
		for i := 1; i <= e.o.runs; i++ {
			r, err := e.natsLatency(ctx, total)
			if err != nil {
				return fmt.Errorf("NATS-only latency run %d: %w", i, err)
			}
			fmt.Fprintf(stdout, "  %v\n", r)
			natsP99 = append(natsP99, float64(r.sum.P99))
		}
	}
	p99 := time.Duration(bench.Median(bridgeP99))
	verdict := "met"
	if p99 > benchTargetP99 {
		verdict = "MISSED"
	}
	fmt.Fprintf(stdout, "\nbridge p99 (median of %d run(s)) %s: target <= %v %s\n", len(bridgeP99), benchUS(p99), benchTargetP99, verdict)
	if len(refP99) > 0 {
		fmt.Fprintf(stdout, "refpipe p99 (median of %d run(s)) %s\n", len(refP99), benchUS(time.Duration(bench.Median(refP99))))
	}
	if len(sseP99) > 0 {
		fmt.Fprintf(stdout, "SSE-only baseline p99 (median of %d run(s)) %s\n", len(sseP99), benchUS(time.Duration(bench.Median(sseP99))))
	}
	if len(natsP99) > 0 {
		fmt.Fprintf(stdout, "NATS-only baseline p99 (median of %d run(s)) %s\n", len(natsP99), benchUS(time.Duration(bench.Median(natsP99))))
	}
	return nil
}

// writeCSV writes a run's latencies to <-latency-csv>/latency-<pipeline>-<n>.csv when asked to.
func (e *benchEnv) writeCSV(pipeline string, rec *bench.Recorder) error {
	if e.o.latencyCSV == "" {
		return nil
	}
	if err := os.MkdirAll(e.o.latencyCSV, 0o755); err != nil {
		return err
	}
	e.csvSeq++
	f, err := os.Create(filepath.Join(e.o.latencyCSV, fmt.Sprintf("latency-%s-%d.csv", pipeline, e.csvSeq)))
	if err != nil {
		return err
	}
	if err := rec.WriteCSV(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sseLatency is the baseline of the latency runs: this process reads the simulator's stream itself with
// the decoder both pipelines use, and records receive time minus event timestamp. No NATS is involved.
func (e *benchEnv) sseLatency(ctx context.Context, total int) (benchLatResult, error) {
	r := benchLatResult{pipeline: "SSE-only"}
	e.simSeq++
	s, err := e.startSim(ctx, fmt.Sprintf("sim-latency-sse-%d", e.simSeq), e.o.rate, total)
	if err != nil {
		return r, err
	}
	defer s.stop(e.log)
	ctx, cancel := context.WithTimeout(ctx, e.o.duration+e.o.timeout)
	defer cancel()
	tok, err := benchToken(ctx, s.tokenURL())
	if err != nil {
		return r, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.streamURL(), nil)
	if err != nil {
		return r, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("stream: HTTP %d", resp.StatusCode)
	}
	rec := &bench.Recorder{}
	dec := eventsource.NewDecoder(resp.Body)
	for rec.Count() < total {
		ev, err := dec.Decode()
		if err != nil {
			return r, fmt.Errorf("stream after %d events: %w", rec.Count(), err)
		}
		if d := ev.Data(); d != "" {
			rec.Record(time.Now(), []byte(d))
		}
	}
	r.sum = rec.Summarize(benchWarmup)
	return r, e.writeCSV(r.pipeline, rec)
}

// natsLatency is the other baseline of the latency runs: this process publishes events of the
// simulator's size at -rate to a JetStream stream of its own (file storage, Nats-Msg-Id, asynchronous
// publishes, as the pipelines do) and a core subscriber on another connection records receive time minus
// the event's timestamp, taken just before its publish. No HTTP is involved.
func (e *benchEnv) natsLatency(ctx context.Context, total int) (benchLatResult, error) {
	r := benchLatResult{pipeline: "NATS-only"}
	const stream, subject = "BENCHNATS", "benchnats.events.GATE_IN"
	ctx, cancel := context.WithTimeout(ctx, e.o.duration+e.o.timeout)
	defer cancel()
	e.deleteStreams(stream)
	defer e.deleteStreams(stream)
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"benchnats.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		return r, err
	}
	rec := &bench.Recorder{}
	subConn, err := nats.Connect(e.natsURL, nats.Name("bridge-bench-latency"))
	if err != nil {
		return r, err
	}
	defer subConn.Close()
	sub, err := subConn.Subscribe(subject, func(m *nats.Msg) { rec.Record(time.Now(), m.Data) })
	if err != nil {
		return r, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := subConn.Flush(); err != nil {
		return r, err
	}
	pubConn, err := nats.Connect(e.natsURL, nats.Name("bridge-bench-publisher"))
	if err != nil {
		return r, err
	}
	defer pubConn.Close()
	js, err := jetstream.New(pubConn, jetstream.WithPublishAsyncMaxPending(4000))
	if err != nil {
		return r, err
	}
	pad := strings.Repeat("x", max(0, e.o.size-110))
	interval := time.Duration(float64(time.Second) / e.o.rate)
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		id := fmt.Sprintf("ev-%08d", i)
		body := fmt.Appendf(nil, `{"id":%q,"timestamp":%q,"type":"GATE_IN","observation":{"pad":%q}}`,
			id, time.Now().UTC().Format(time.RFC3339Nano), pad)
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: body,
			Header: nats.Header{jetstream.MsgIDHeader: {id}}}); err != nil {
			return r, fmt.Errorf("publish %d: %w", i, err)
		}
	}
	for rec.Count() < total {
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("only %d of %d events received in time", rec.Count(), total)
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return r, fmt.Errorf("acknowledgements still pending: %d", js.PublishAsyncPending())
	}
	r.sum = rec.Summarize(benchWarmup)
	return r, e.writeCSV(r.pipeline, rec)
}

// benchToken gets an access token from the simulator (password grant, the demo account).
func benchToken(ctx context.Context, tokenURL string) (string, error) {
	form := url.Values{"grant_type": {"password"}, "username": {"demo"}, "password": {"demo"},
		"client_id": {sim.DefaultClientID}, "scope": {"openid"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var t struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil || resp.StatusCode != http.StatusOK || t.AccessToken == "" {
		return "", fmt.Errorf("token: HTTP %d (%v)", resp.StatusCode, err)
	}
	return t.AccessToken, nil
}

// profile runs the bridge once in this process under the CPU profiler: the simulator and nats-server stay
// in their own processes, so the profile holds the bridge (and this benchmark's light polling) only.
func (e *benchEnv) profile(ctx context.Context, stdout io.Writer) error {
	e.seq++
	prefix := fmt.Sprintf("bench%d", e.seq)
	layout := publish.Layout{Prefix: prefix}
	defer e.deleteStreams(layout.Events(), layout.Reports(), layout.DLQ())
	rate, n := -1.0, e.o.n
	if e.o.latency { // profile at the latency test's rate instead of a flood
		rate, n = e.o.rate, int(e.o.rate*e.o.duration.Seconds())
	}
	s, err := e.startSim(ctx, "sim-profile", rate, n)
	if err != nil {
		return err
	}
	defer s.stop(e.log)
	httpAddr, err := bench.FreeAddr()
	if err != nil {
		return err
	}
	vars := e.bridgeVars(s, prefix, httpAddr)
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		return err
	}
	b, err := newBridge(cfg, newLogger(e.log, "text", cfg.SlogLevel()))
	if err != nil {
		return err
	}
	f, err := os.Create(e.o.cpuprofile)
	if err != nil {
		return err
	}
	defer f.Close()

	cpu0, _ := bench.SelfUsage()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(rctx) }()
	wctx, cancel := context.WithTimeout(ctx, e.o.timeout)
	st, werr := bench.WaitStream(wctx, e.js, layout.Events(), uint64(n), benchPoll, nil)
	cancel()
	stop()
	rerr := <-done
	pprof.StopCPUProfile()
	cpu1, maxRSS := bench.SelfUsage()
	if err := errors.Join(werr, rerr); err != nil {
		return err
	}
	cpu := cpu1 - cpu0
	fmt.Fprintf(stdout, "in-process bridge: %d events, %.0f events/s (store window), CPU of this process %.2f µs/event "+
		"(includes the benchmark's polling), peak RSS of this process %.1f MB\nCPU profile: %s\n",
		st.Msgs, bench.Rate(st), float64(cpu.Nanoseconds())/1e3/float64(max(st.Msgs, 1)), benchMB(maxRSS), e.o.cpuprofile)
	if e.o.memprofile != "" {
		mf, err := os.Create(e.o.memprofile)
		if err != nil {
			return err
		}
		defer mf.Close()
		if err := pprof.Lookup("allocs").WriteTo(mf, 0); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "allocation profile: %s\n", e.o.memprofile)
	}
	return nil
}

// benchMachine describes the machine and its load, for the record.
func benchMachine() string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "unknown"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				mem = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("machine: %d CPUs (%s), memory %s, %s %s/%s\nload average at the start: %s; %s\n",
		runtime.NumCPU(), model, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH, benchLoadAvg(), benchSpeed())
}

func benchLoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// benchSpeed measures this machine's single-core speed right now (SHA-256 throughput over 32 MB), so that
// a slow phase of a shared host shows in the record even when the load average does not.
func benchSpeed() string {
	buf := make([]byte, 1<<20)
	start := time.Now()
	for range 32 {
		sum := sha256.Sum256(buf)
		buf[0] = sum[0]
	}
	return fmt.Sprintf("sha256 %.0f MB/s", 32/time.Since(start).Seconds())
}

// benchOutput is a bytes.Buffer safe for a child's output goroutine and the reader.
type benchOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *benchOutput) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *benchOutput) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
