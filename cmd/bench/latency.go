package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/launchdarkly/eventsource"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
)

// benchLatResult is one latency run.
type benchLatResult struct {
	pipeline string
	sum      LatencySummary
	cpu      time.Duration // CPU between the first and the last event received
	cpuN     int           // events received in that span
	cpuNote  string
	peakRSS  int64
	self     string
	units    string // the units view's lag (unitsLag), for a bridge with the view on
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
	if r.units != "" {
		out += "\n        " + r.units
	}
	return out
}

func benchUS(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1e3) }

// latencyRun measures one pipeline at the configured rate: start is called with the simulator and must
// start the pipeline; subject is where its events appear.
//
// values, when not "", is the subject of the bridge's units bucket ($KV.<bucket>.>): the view's lag behind
// the events is measured too (unitsLag), and the bridge stopped once the view has caught up.
func (e *benchEnv) latencyRun(ctx context.Context, name, subject, values string, total int,
	start func(*benchSim) (*Child, error), selfExits bool) (benchLatResult, error) {
	r := benchLatResult{pipeline: name}
	rec := &Recorder{}
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
	var view *unitsLag
	if values != "" {
		if view, err = watchUnits(nc, subject, values); err != nil {
			return r, err
		}
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
			if ps, err := ReadStat(c.Pid()); err == nil {
				cpu0, n0 = ps.CPU(), n
			}
		}
		if n >= total {
			if ps, err := ReadStat(c.Pid()); err == nil {
				cpu1, n1 = ps.CPU(), n
			}
			break
		}
		if c.Exited() {
			// the yardstick exits once its publishes are acknowledged: the last messages may still be on their
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
	if view != nil {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		view.settle(sctx)
		cancel()
		r.units = view.String()
	}
	_ = sub.Unsubscribe()
	var u Usage
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
	bridgeP99 := make([][]float64, len(e.bridges))
	var refP99, sseP99 []float64
	for i := 1; i <= e.o.runs; i++ {
		fmt.Fprintf(stdout, "run %d (load %s; %s)\n", i, benchLoadAvg(), benchSpeed())
		for j, b := range e.bridges {
			e.seq++
			prefix := fmt.Sprintf("bench%d", e.seq)
			lay := layout.Streams{Prefix: prefix}
			r, err := e.latencyRun(ctx, b.name, lay.EventsSubject(), lay.UnitSubject(">"), total, func(s *benchSim) (*Child, error) {
				return e.startBridge(ctx, b, fmt.Sprintf("%s-latency-%d", b.name, i), s, prefix)
			}, false)
			e.deleteStreams(lay.Events(), lay.Reports(), lay.DLQ(), lay.UnitsStream())
			if err != nil {
				return fmt.Errorf("%s latency run %d: %w", b.name, i, err)
			}
			fmt.Fprintf(stdout, "  %v\n", r)
			bridgeP99[j] = append(bridgeP99[j], float64(r.sum.P99))
		}
		if e.refpipe == "" {
			continue
		}
		var out benchOutput
		e.deleteStreams(benchRefStream)
		r, err := e.latencyRun(ctx, e.refName, benchRefSubject, "", total, func(s *benchSim) (*Child, error) {
			return e.startRefpipe(ctx, fmt.Sprintf("%s-latency-%d", e.refName, i), s, total, &out)
		}, true)
		e.deleteStreams(benchRefStream)
		if err != nil {
			return fmt.Errorf("%s latency run %d: %w", e.refName, i, err)
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
	natsModes := []natsHeaders{natsPlain}
	if e.o.natsTrace {
		natsModes = []natsHeaders{natsBridgeHeaders, natsTraceparent}
	}
	natsP99 := make([][]float64, len(natsModes))
	if !e.o.skipNATS {
		for i := 1; i <= e.o.runs; i++ {
			for k, mode := range natsModes {
				r, err := e.natsLatency(ctx, total, mode)
				if err != nil {
					return fmt.Errorf("%s latency run %d: %w", mode, i, err)
				}
				fmt.Fprintf(stdout, "  %v\n", r)
				natsP99[k] = append(natsP99[k], float64(r.sum.P99))
			}
		}
	}
	for j, b := range e.bridges {
		p99 := time.Duration(Median(bridgeP99[j]))
		verdict := "met"
		if p99 > benchTargetP99 {
			verdict = "MISSED"
		}
		fmt.Fprintf(stdout, "\n%s p99 (median of %d run(s)) %s: target <= %v %s\n", b.name, len(bridgeP99[j]), benchUS(p99), benchTargetP99, verdict)
	}
	if len(refP99) > 0 {
		fmt.Fprintf(stdout, "%s p99 (median of %d run(s)) %s\n", e.refName, len(refP99), benchUS(time.Duration(Median(refP99))))
	}
	if len(sseP99) > 0 {
		fmt.Fprintf(stdout, "SSE-only baseline p99 (median of %d run(s)) %s\n", len(sseP99), benchUS(time.Duration(Median(sseP99))))
	}
	for k, p99 := range natsP99 {
		if len(p99) > 0 {
			fmt.Fprintf(stdout, "%s baseline p99 (median of %d run(s)) %s\n", natsModes[k], len(p99), benchUS(time.Duration(Median(p99))))
		}
	}
	return nil
}

// writeCSV writes a run's latencies to <-latency-csv>/latency-<pipeline>-<n>.csv when asked to.
func (e *benchEnv) writeCSV(pipeline string, rec *Recorder) error {
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
	rec := &Recorder{}
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

// natsHeaders is what the NATS-only baseline's messages carry besides their data.
type natsHeaders int

const (
	natsPlain         natsHeaders = iota // Nats-Msg-Id alone
	natsBridgeHeaders                    // a bridge event's headers, but for the fence's
	natsTraceparent                      // the same and a sampled traceparent, as with tracing at ratio 1
)

func (h natsHeaders) String() string {
	return [...]string{"NATS-only", "NATS+headers", "NATS+headers+traceparent"}[h]
}

// header returns the headers of message id with timestamp ts.
func (h natsHeaders) header(id, ts string) nats.Header {
	hdr := nats.Header{jetstream.MsgIDHeader: {id}}
	if h == natsPlain {
		return hdr
	}
	for k, v := range map[string]string{"Tracking-Event-Id": id, "Tracking-Event-Type": "GATE_IN",
		"Content-Type": "application/json", "ce-specversion": "1.0", "ce-id": id,
		"ce-source": "https://partner-api.example.com/v1.0", "ce-type": "benchnats.events.GATE_IN", "ce-time": ts,
		"ce-datacontenttype": "application/json", "Bridge-Resume-After": id} {
		hdr[k] = []string{v}
	}
	if h == natsTraceparent {
		var tid [16]byte
		var sid [8]byte
		_, _ = rand.Read(tid[:])
		_, _ = rand.Read(sid[:])
		hdr["traceparent"] = []string{"00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(sid[:]) + "-01"}
	}
	return hdr
}

// natsLatency is the other baseline of the latency runs: this process publishes events of the
// simulator's size at -rate to a JetStream stream of its own (file storage, Nats-Msg-Id, asynchronous
// publishes, as the pipelines do) and a core subscriber on another connection records receive time minus
// the event's timestamp, taken just before its publish. No HTTP is involved. headers says what the
// messages carry besides their data.
func (e *benchEnv) natsLatency(ctx context.Context, total int, headers natsHeaders) (benchLatResult, error) {
	r := benchLatResult{pipeline: headers.String()}
	const stream, subject = "BENCHNATS", "benchnats.events.GATE_IN"
	ctx, cancel := context.WithTimeout(ctx, e.o.duration+e.o.timeout)
	defer cancel()
	e.deleteStreams(stream)
	defer e.deleteStreams(stream)
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"benchnats.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		return r, err
	}
	rec := &Recorder{}
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
		ts := time.Now().UTC().Format(time.RFC3339Nano)
		body := fmt.Appendf(nil, `{"id":%q,"timestamp":%q,"type":"GATE_IN","observation":{"pad":%q}}`, id, ts, pad)
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: body, Header: headers.header(id, ts)}); err != nil {
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
