package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
)

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
	ruMaxRSS  int64         // ru_maxrss (includes this process's peak at the fork; see Usage)
	serverCPU time.Duration // nats-server CPU during the run
	stored    uint64        // bytes the stream holds
	exitCode  int
	self      string // the yardstick's own RESULT line
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
// message is seen stored. A child that exits is fine if the stream holds n messages afterwards (the
// yardstick exits by itself once its publishes are acknowledged).
func (e *benchEnv) waitStored(ctx context.Context, c *Child, stream string, n uint64) (jetstream.StreamState, time.Duration, time.Time, error) {
	var startCPU time.Duration
	errExited := errors.New("exited")
	ctx, cancel := context.WithTimeout(ctx, e.o.timeout)
	defer cancel()
	st, err := WaitStream(ctx, e.js, stream, n, benchPoll, func(st jetstream.StreamState) error {
		if st.Msgs > 0 && startCPU == 0 {
			if ps, err := ReadStat(c.Pid()); err == nil {
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
		st, err = StreamState(qctx, e.js, stream)
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

func (e *benchEnv) throughputBridge(ctx context.Context, b benchBridge, run int) (benchTPResult, error) {
	e.seq++
	prefix := fmt.Sprintf("bench%d", e.seq)
	layout := layout.Streams{Prefix: prefix}
	defer e.deleteStreams(layout.Events(), layout.Reports(), layout.DLQ(), layout.UnitsStream())
	r := benchTPResult{pipeline: b.name}
	if e.o.cluster {
		// Replicated streams made here, so that a build without BRIDGE_STREAM_REPLICAS uses them too.
		layout.Replicas, layout.DuplicateWindow = benchReplicas, 2*time.Minute
		if err := layout.Ensure(ctx, e.js, true, slog.New(slog.DiscardHandler)); err != nil {
			return r, err
		}
	}
	s, err := e.startSim(ctx, fmt.Sprintf("sim-%d-%s", run, b.name), -1, e.o.n)
	if err != nil {
		return r, err
	}
	defer s.stop(e.log)
	srv0 := e.serverCPU()
	c, err := e.startBridge(ctx, b, fmt.Sprintf("%s-%d", b.name, run), s, prefix)
	if err != nil {
		return r, err
	}
	defer c.Kill()
	markers, err := e.fenceMarkers(ctx, layout)
	if err != nil {
		return r, e.childFailed(c, err)
	}
	st, startCPU, seen, err := e.waitStored(ctx, c, layout.Events(), uint64(e.o.n)+markers)
	if err != nil {
		return r, err
	}
	u, err := c.Stop(30 * time.Second)
	if err != nil {
		return r, e.childFailed(c, err)
	}
	if markers > 0 {
		// The rate counts events only, from the first event's storage time.
		first, err := e.js.Stream(ctx, layout.Events())
		if err == nil {
			var m *jetstream.RawStreamMsg
			if m, err = first.GetMsg(ctx, st.FirstSeq+markers); err == nil {
				st.FirstTime, st.FirstSeq, st.Msgs = m.Time, m.Sequence, st.Msgs-markers
			}
		}
		if err != nil {
			return r, err
		}
	}
	r.serverCPU = e.serverCPU() - srv0
	if dlq, err := StreamState(ctx, e.js, layout.DLQ()); err == nil && dlq.Msgs > 0 {
		r.note = fmt.Sprintf("%d messages dead-lettered", dlq.Msgs)
	}
	r.fill(st, startCPU, u, seen.Sub(c.Started))
	return r, nil
}

// benchReplicas is the replicas of the bridge's streams with -cluster.
const benchReplicas = 3

// fenceMarkers waits for the bridge's first message in the events stream and returns how many fence
// markers a leader stores before its events (docs/replicas.md#the-fence): publish.FenceWidth
// when that first message is one, 0 for a build without fencing.
func (e *benchEnv) fenceMarkers(ctx context.Context, layout layout.Streams) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, e.o.timeout)
	defer cancel()
	st, err := WaitStream(ctx, e.js, layout.Events(), 1, benchPoll, nil)
	if err != nil {
		return 0, err
	}
	s, err := e.js.Stream(ctx, layout.Events())
	if err != nil {
		return 0, err
	}
	m, err := s.GetMsg(ctx, st.FirstSeq)
	if err != nil {
		return 0, err
	}
	if strings.HasPrefix(m.Subject, layout.FenceSubject()+".") {
		return publish.FenceWidth, nil
	}
	return 0, nil
}

func (e *benchEnv) throughputRefpipe(ctx context.Context, run int) (benchTPResult, error) {
	e.deleteStreams(benchRefStream) // the yardstick re-creates it; make sure no old state is polled
	defer e.deleteStreams(benchRefStream)
	r := benchTPResult{pipeline: e.refName}
	s, err := e.startSim(ctx, fmt.Sprintf("sim-%d-%s", run, e.refName), -1, e.o.n)
	if err != nil {
		return r, err
	}
	defer s.stop(e.log)
	srv0 := e.serverCPU()
	var out benchOutput
	c, err := e.startRefpipe(ctx, fmt.Sprintf("%s-%d", e.refName, run), s, e.o.n, &out)
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

func (r *benchTPResult) fill(st jetstream.StreamState, startCPU time.Duration, u Usage, e2e time.Duration) {
	r.events = st.Msgs
	r.stored = st.Bytes
	r.rate = Rate(st)
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
	fmt.Fprintf(stdout, "throughput: %d events of ~%d bytes per run, %d run(s) per pipeline, bridge window %s, %s window %d\n",
		e.o.n, e.o.size, e.o.runs, e.windowDesc(), e.refDesc(), e.o.refWindow)
	if len(e.bridges) > 1 || e.bridges[0].name != "bridge" {
		for _, b := range e.bridges {
			fmt.Fprintf(stdout, "  %s: %s\n", b.name, b.bin)
		}
	}
	fmt.Fprintln(stdout)
	bridgeRes := make([][]benchTPResult, len(e.bridges))
	var refRes []benchTPResult
	for i := 1; i <= e.o.runs; i++ {
		fmt.Fprintf(stdout, "run %d (load %s; %s)\n", i, benchLoadAvg(), benchSpeed())
		for j, b := range e.bridges {
			r, err := e.throughputBridge(ctx, b, i)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", b.name, i, err)
			}
			fmt.Fprintf(stdout, "  %v\n", r)
			bridgeRes[j] = append(bridgeRes[j], r)
		}
		if e.refpipe == "" {
			continue
		}
		r, err := e.throughputRefpipe(ctx, i)
		if err != nil {
			return fmt.Errorf("%s run %d: %w", e.refName, i, err)
		}
		fmt.Fprintf(stdout, "  %v\n", r)
		refRes = append(refRes, r)
	}

	med := func(rs []benchTPResult, f func(benchTPResult) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = f(r)
		}
		return Median(vs)
	}
	spread := func(rs []benchTPResult, f func(benchTPResult) float64, format string) string {
		lo, hi := f(rs[0]), f(rs[0])
		for _, r := range rs[1:] {
			lo, hi = min(lo, f(r)), max(hi, f(r))
		}
		return fmt.Sprintf(format+" ("+format+"–"+format+")", med(rs, f), lo, hi)
	}
	rate := func(r benchTPResult) float64 { return r.rate }
	cpu := func(r benchTPResult) float64 { return r.cpuPerEvent() }
	rss := func(r benchTPResult) float64 { return benchMB(r.peakRSS) }
	srv := func(r benchTPResult) float64 {
		return float64(r.serverCPU.Nanoseconds()) / 1e3 / float64(max(r.events, 1))
	}
	fmt.Fprintf(stdout, "\nmedians of %d run(s) (range)\n", e.o.runs)
	fmt.Fprintf(stdout, "  %-9s %24s %22s %19s %24s\n", "pipeline", "events/s", "CPU µs/event", "peak RSS MB", "nats-server µs/event")
	type pipeline struct {
		name string
		rs   []benchTPResult
	}
	var ps []pipeline
	for j, b := range e.bridges {
		ps = append(ps, pipeline{b.name, bridgeRes[j]})
	}
	ps = append(ps, pipeline{e.refName, refRes})
	for _, p := range ps {
		if len(p.rs) == 0 {
			continue
		}
		fmt.Fprintf(stdout, "  %-9s %24s %22s %19s %24s\n", p.name, spread(p.rs, rate, "%.0f"), spread(p.rs, cpu, "%.2f"),
			spread(p.rs, rss, "%.1f"), spread(p.rs, srv, "%.2f"))
	}
	if len(e.bridges) > 1 {
		first := ps[0]
		for _, p := range ps[1:len(e.bridges)] {
			ratio := func(f func(benchTPResult) float64) float64 { return med(p.rs, f) / med(first.rs, f) }
			fmt.Fprintf(stdout, "\n%s / %s (medians): events/s %.3f, CPU µs/event %.3f, peak RSS %.3f, nats-server %.3f\n",
				p.name, first.name, ratio(rate), ratio(cpu), ratio(rss), ratio(srv))
		}
	}
	if len(refRes) == 0 {
		return nil
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	for _, p := range ps[:len(e.bridges)] {
		ratio := func(f func(benchTPResult) float64) float64 { return med(p.rs, f) / med(refRes, f) }
		rr, cr, mr := ratio(rate), ratio(cpu), ratio(rss)
		fmt.Fprintf(stdout, "\n%s / %s (medians)\n", p.name, e.refName)
		fmt.Fprintf(stdout, "  events/s      %.3f   target >= %.2f  %s\n", rr, benchTargetRate, verdict(rr >= benchTargetRate))
		fmt.Fprintf(stdout, "  CPU µs/event  %.3f   target <= %.2f  %s\n", cr, benchTargetCPU, verdict(cr <= benchTargetCPU))
		fmt.Fprintf(stdout, "  peak RSS      %.3f   target <= %.2f  %s\n", mr, benchTargetRSS, verdict(mr <= benchTargetRSS))
		fmt.Fprintf(stdout, "  nats-server   %.3f   (no target: the server's CPU per event caused by each pipeline)\n", ratio(srv))
	}
	return nil
}

// refDesc names the yardstick in the output; "yardstick" when there is none.
func (e *benchEnv) refDesc() string {
	if e.refName == "" {
		return "yardstick"
	}
	return e.refName
}

func (e *benchEnv) windowDesc() string {
	if e.o.window > 0 {
		return strconv.Itoa(e.o.window)
	}
	return strconv.Itoa(config.Default().PublishWindow) + " (default)"
}
