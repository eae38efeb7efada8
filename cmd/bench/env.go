package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
)

// benchEnv is what all runs share: the temporary directory, the nats-server child and a connection to it.
type benchEnv struct {
	ctx     context.Context // the benchmark's; cancelled by SIGINT or SIGTERM
	o       benchOptions
	self    string
	dir     string
	log     io.Writer
	natsSrv *Child
	natsURL string
	nc      *nats.Conn
	js      jetstream.JetStream
	refpipe string        // the yardstick's binary (the baseline, or -refpipe's); "" with -skip-refpipe
	refName string        // the yardstick's name in the output: "baseline" or "refpipe"
	sim     string        // simulator binary, built from ./cmd/sim
	bridges []benchBridge // -bridge-bin's, else one built from ./cmd/bridge; none with -cpuprofile
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
		if o.refpipe == "" {
			e.refName = "baseline"
			e.refpipe, err = buildCommand(ctx, "bench/baseline", dir)
		} else {
			e.refName = "refpipe"
			e.refpipe, err = buildRefpipe(ctx, o.refpipe, dir)
		}
		if err != nil {
			return nil, err
		}
	}
	if e.sim, err = buildCommand(ctx, "sim", dir); err != nil {
		return nil, err
	}
	switch {
	case len(o.bridges) > 0:
		e.bridges = o.bridges
		for _, b := range e.bridges {
			if _, err := os.Stat(b.bin); err != nil {
				return nil, fmt.Errorf("-bridge-bin %s: %w", b.name, err)
			}
		}
	case o.cpuprofile == "": // -cpuprofile runs the daemon in this process
		bin, err := buildCommand(ctx, "bridge", dir)
		if err != nil {
			return nil, err
		}
		e.bridges = []benchBridge{{name: "bridge", bin: bin}}
	}

	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"-serve-nats", filepath.Join(dir, "jetstream"), "-nats-addr", addr}
	urls := []string{"nats://" + addr}
	if o.cluster {
		var peers, routes []string
		for i := range 5 {
			a, err := FreeAddr()
			if err != nil {
				return nil, err
			}
			if i < 2 {
				peers = append(peers, a)
				urls = append(urls, "nats://"+a)
			} else {
				routes = append(routes, a)
			}
		}
		args = append(args, "-nats-peers", strings.Join(peers, ","), "-nats-routes", strings.Join(routes, ","))
	}
	cmd := exec.CommandContext(ctx, self, args...)
	if e.natsSrv, err = e.startChild("nats-server", cmd); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := WaitTCP(wctx, addr, e.natsSrv.Done()); err != nil {
		return nil, e.childFailed(e.natsSrv, fmt.Errorf("nats-server not accepting connections: %w", err))
	}
	e.natsURL = strings.Join(urls, ",")
	if e.nc, err = nats.Connect(e.natsURL, nats.Name("bridge-bench")); err != nil {
		return nil, err
	}
	if e.js, err = jetstream.New(e.nc); err != nil {
		return nil, err
	}
	for {
		// Each attempt bounded: a cluster without a meta leader yet leaves the request unanswered.
		actx, acancel := context.WithTimeout(wctx, 2*time.Second)
		_, err := e.js.AccountInfo(actx)
		acancel()
		if err == nil {
			break
		}
		if wctx.Err() != nil {
			return nil, fmt.Errorf("JetStream not ready at %s: %w", e.natsURL, err)
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

// buildRefpipe returns an outside yardstick's binary (-refpipe): src itself when it is a file, else built
// from the directory.
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

// buildCommand builds ./cmd/<name> of this module into dir with 'go build' and returns the binary.
func buildCommand(ctx context.Context, name, dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(name))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/tracking-bridge/tracking-bridge/cmd/"+name)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building ./cmd/%s (run the benchmark from the repository): %w\n%s", name, err, b)
	}
	return out, nil
}

// startChild starts cmd with its output in logs/<name>.log, unless cmd already has a Stdout.
func (e *benchEnv) startChild(name string, cmd *exec.Cmd) (*Child, error) {
	f, err := os.Create(e.logPath(name))
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	if cmd.Stdout == nil {
		cmd.Stdout = f
	}
	cmd.Stderr = f
	return Start(name, cmd)
}

func (e *benchEnv) logPath(name string) string { return filepath.Join(e.dir, "logs", name+".log") }

// childFailed adds the tail of the child's log to err.
func (e *benchEnv) childFailed(c *Child, err error) error {
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

// benchSim is a running simulator child.
type benchSim struct {
	*Child
	base string // http://127.0.0.1:port
}

func (s *benchSim) streamURL() string {
	return s.base + sim.DefaultBasePath + "/tracking/events/stream"
}
func (s *benchSim) tokenURL() string { return s.base + "/auth/token" }

// startSim starts a fresh simulator child: a flood of n events, or rate events/s up to n.
func (e *benchEnv) startSim(ctx context.Context, name string, rate float64, n int) (*benchSim, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, e.sim, "-addr", addr, "-log-format", "text",
		"-rate", strconv.FormatFloat(rate, 'f', -1, 64), "-limit", strconv.Itoa(n), "-size", strconv.Itoa(e.o.size),
		"-id-tag=") // the same ids in every run: the events of every run are of one size
	c, err := e.startChild(name, cmd)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := WaitTCP(wctx, addr, c.Done()); err != nil {
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
// variables, plus those that give it the benchmark's configuration (config.Config.Environ).
func (e *benchEnv) bridgeEnv(s *benchSim, prefix, httpAddr string) ([]string, error) {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.Prefix+"_") {
			env = append(env, kv)
		}
	}
	vars, err := e.bridgeConfig(s, prefix, httpAddr).Environ()
	if err != nil {
		return nil, err
	}
	return append(env, vars...), nil
}

// bridgeConfig is the configuration of a bridge under test, in-process (profile) or as a child
// (bridgeEnv): the defaults, with the simulator and NATS of this run.
func (e *benchEnv) bridgeConfig(s *benchSim, prefix, httpAddr string) *config.Config {
	c := config.Default()
	c.UpstreamURL = s.base + sim.DefaultBasePath
	c.TokenURL = s.tokenURL()
	c.ClientID = sim.DefaultClientID
	c.Username, c.Password = "demo", "demo"
	c.InsecureHTTP = true
	c.NATSURL = e.natsURL
	c.HTTPAddr = httpAddr
	c.LogLevel = "warn"
	// A fresh set of streams per run: the simulator's ids repeat from run to run.
	c.SubjectPrefix = prefix
	// The yardstick's duplicate window, so that the server's deduplication work is the same.
	c.DuplicateWindow = 2 * time.Minute
	if e.o.window > 0 {
		c.PublishWindow = e.o.window
	}
	if e.o.cluster {
		c.StreamReplicas = benchReplicas
	}
	return c
}

func (e *benchEnv) startBridge(ctx context.Context, b benchBridge, name string, s *benchSim, prefix string) (*Child, error) {
	httpAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	return e.startBridgeOn(ctx, b, name, s, prefix, httpAddr)
}

// startBridgeOn starts a bridge child whose HTTP endpoints listen on httpAddr.
func (e *benchEnv) startBridgeOn(ctx context.Context, b benchBridge, name string, s *benchSim, prefix, httpAddr string) (*Child, error) {
	env, err := e.bridgeEnv(s, prefix, httpAddr)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, b.bin, "run")
	cmd.Env = env
	return e.startPipeline(name, cmd)
}

// benchRSSInterval is how often a pipeline's VmHWM is read while it runs.
const benchRSSInterval = 50 * time.Millisecond

// startPipeline starts a measured child: like startChild, also tracking its peak RSS.
func (e *benchEnv) startPipeline(name string, cmd *exec.Cmd) (*Child, error) {
	c, err := e.startChild(name, cmd)
	if err == nil {
		c.TrackPeakRSS(benchRSSInterval)
	}
	return c, err
}

func (e *benchEnv) startRefpipe(ctx context.Context, name string, s *benchSim, n int, stdout io.Writer) (*Child, error) {
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
	st, err := ReadStat(e.natsSrv.Pid())
	if err != nil {
		return 0
	}
	return st.CPU()
}
