package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// The helpers of the operations tests carry an "ops" prefix: other test files of this package have
// their own.

// opsBridge is a bridge running in the test, configured in Go (simtest.Upstream.Config).
type opsBridge struct {
	b      *Daemon
	logs   *testutil.Buffer
	cancel context.CancelFunc
	done   chan error
	addr   string
	// beforeStop stops what runs on the bridge's connection (a report consumer) before the bridge.
	beforeStop []func()
}

// opsStartBridge validates a copy of cfg, builds and runs a bridge with it; it waits until its HTTP
// endpoint listens. The bridge is stopped at the end of the test.
func opsStartBridge(t *testing.T, cfg *config.Config) *opsBridge {
	t.Helper()
	return opsStartBridgeWith(t, cfg, nil)
}

// opsStartBridgeWith is opsStartBridge with a hook called between New and Run, and New's options.
func opsStartBridgeWith(t *testing.T, c *config.Config, hook func(*opsBridge), opts ...Option) *opsBridge {
	t.Helper()
	cfg := *c // the caller's may start another bridge
	if err := cfg.Validate(); err != nil {
		t.Fatalf("configuration: %v", err)
	}
	cfg.LoginRetry = time.Second // below config.MinLoginRetry, which guards users: tests wait seconds
	if cfg.LeaseTTL == config.Default().LeaseTTL {
		cfg.LeaseTTL = 2 * time.Second // a bridge stopped without releasing the lease is replaced after this
	}
	logs := &testutil.Buffer{}
	log := logging.New(logs, cfg.LogFormat, cfg.SlogLevel())
	b, err := New(&cfg, log, BuildInfo{}, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ob := &opsBridge{b: b, logs: logs, cancel: cancel, done: make(chan error, 1)}
	t.Cleanup(func() {
		ob.stop(t)
		if t.Failed() {
			t.Logf("bridge logs:\n%s", logs)
		}
	})
	if hook != nil {
		hook(ob)
	}
	go func() { ob.done <- b.Run(ctx) }()
	testutil.EventuallyState(t, 10*time.Second, "HTTP endpoint listening", func() (bool, string) {
		ob.addr = b.ops.httpAddr()
		select {
		case err := <-ob.done:
			ob.done <- err
			t.Fatalf("bridge stopped at start: %v\n%s", err, logs)
		default:
		}
		return ob.addr != "", ""
	})
	return ob
}

// stop stops the bridge and returns Run's error.
func (ob *opsBridge) stop(t *testing.T) error {
	t.Helper()
	for _, f := range ob.beforeStop {
		f()
	}
	ob.beforeStop = nil
	ob.cancel()
	select {
	case err := <-ob.done:
		ob.done <- err
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("bridge did not stop\n%s", ob.logs)
		return nil
	}
}

// exited waits until the bridge stops by itself, and returns Run's error; why says what should stop it.
func (ob *opsBridge) exited(t *testing.T, timeout time.Duration, why string) error {
	t.Helper()
	select {
	case err := <-ob.done:
		ob.done <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("the bridge kept running %s\n%s", why, ob.logs)
		return nil
	}
}

// get fetches a path of the bridge's HTTP endpoint.
func (ob *opsBridge) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + ob.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitReady waits until /readyz answers want (200 or 503) and its body contains every one of lines.
func (ob *opsBridge) waitReady(t *testing.T, timeout time.Duration, want int, lines ...string) string {
	t.Helper()
	var body string
	testutil.EventuallyState(t, timeout, fmt.Sprintf("/readyz %d with %q", want, lines), func() (bool, string) {
		var code int
		code, body = ob.get(t, "/readyz")
		if code != want {
			return false, fmt.Sprintf("%d\n%s", code, body)
		}
		for _, l := range lines {
			if !strings.Contains(body, l) {
				return false, fmt.Sprintf("%d\n%s", code, body)
			}
		}
		return true, ""
	})
	return body
}

// status fetches and decodes GET /status.
func (ob *opsBridge) status(t *testing.T) statusDoc {
	t.Helper()
	resp, err := http.Get("http://" + ob.addr + "/status")
	if err != nil {
		t.Fatalf("GET /status: %v", err)
	}
	defer resp.Body.Close()
	var d statusDoc
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/json" {
		t.Fatalf("GET /status = %d %s", resp.StatusCode, ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatalf("GET /status: %v", err)
	}
	return d
}

// requireAlive checks that /healthz answers 200.
func (ob *opsBridge) requireAlive(t *testing.T) {
	t.Helper()
	if code, body := ob.get(t, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d %q, want 200", code, body)
	}
}

// counter returns the value of a counter or gauge (a histogram's count) with the given labels from the
// bridge's registry.
func (ob *opsBridge) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return testutil.Metric(t, ob.b.ops.reg, name, labels)
}

// opsStreamMsgs returns the number of messages in a JetStream stream, over a connection of its own.
func opsStreamMsgs(t *testing.T, natsURL, stream string, opts ...nats.Option) uint64 {
	t.Helper()
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.StreamMsgs(t, js, stream)
}

var allReady = []string{"nats: ok", "jetstream_streams: ok", "upstream_token: ok", "upstream_stream: ok"}

// TestReadyzFollowsNATS: /readyz turns 503 naming NATS within seconds of the server stopping and 200
// again after it is back; /healthz stays 200 throughout.
func TestReadyzFollowsNATS(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{EventRate: 20})
	ob := opsStartBridge(t, up.Config(ns.URL()))

	ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	ob.requireAlive(t)

	ns.Stop()
	start := time.Now()
	body := ob.waitReady(t, 5*time.Second, http.StatusServiceUnavailable, "nats: not ready:")
	t.Logf("not ready after %v:\n%s", time.Since(start).Round(time.Millisecond), body)
	ob.requireAlive(t)
	if ob.counter(t, "bridge_nats_connected", nil) != 0 {
		t.Error("bridge_nats_connected should be 0 while NATS is down")
	}

	ns.Start()
	ob.waitReady(t, 20*time.Second, http.StatusOK, allReady...)
	ob.requireAlive(t)
	if got := ob.counter(t, "bridge_nats_reconnects_total", nil); got < 1 {
		t.Errorf("bridge_nats_reconnects_total = %v, want >= 1", got)
	}
}

// TestReadyzStreamUnavailable: while the upstream answers the stream 403 or 404 (the function is not
// available to the account), /readyz is 503 and says so, the bridge stays alive and retries at
// BRIDGE_UNAVAILABLE_RETRY, and it is ready again once the stream is served.
func TestReadyzStreamUnavailable(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusForbidden, http.StatusNotFound} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			ns := testutil.StartNATS(t, nil)
			up := simtest.Start(t, false, sim.Options{EventRate: 20, Faults: sim.Faults{StreamStatus: code}})
			ob := opsStartBridge(t, up.Config(ns.URL(), func(c *config.Config) { c.UnavailableRetry = 300 * time.Millisecond }))
			ob.waitReady(t, 10*time.Second, http.StatusServiceUnavailable, "nats: ok",
				fmt.Sprintf("upstream_stream: not ready: unavailable: tracking stream not available to this account: HTTP %d", code))
			ob.requireAlive(t)
			refused := up.Sim().Stats().StreamRequests
			testutil.Eventually(t, 10*time.Second, "another attempt at the unavailable pace", func() bool {
				return up.Sim().Stats().StreamRequests > refused
			})
			up.Sim().SetFaults(sim.Faults{})
			ob.waitReady(t, 10*time.Second, http.StatusOK, allReady...)
		})
	}
}

// TestReadyzFollowsUpstreamStream: /readyz turns 503 naming the stream while the upstream answers the
// stream 503, or is closed, and 200 again once it serves it; /healthz stays 200.
func TestReadyzFollowsUpstreamStream(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{EventRate: 20})
	ob := opsStartBridge(t, up.Config(ns.URL()))
	ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)

	// 503 to new stream connections; the open one is dropped after its next event.
	up.Sim().SetFaults(sim.Faults{StreamStatus: http.StatusServiceUnavailable, DropEvery: 1})
	start := time.Now()
	body := ob.waitReady(t, 10*time.Second, http.StatusServiceUnavailable, "upstream_stream: not ready: reconnecting: HTTP 503")
	t.Logf("not ready after %v:\n%s", time.Since(start).Round(time.Millisecond), body)
	ob.requireAlive(t)
	if got := ob.counter(t, "bridge_stream_state", map[string]string{"state": "reconnecting"}); got != 1 {
		t.Errorf("bridge_stream_state{state=reconnecting} = %v, want 1", got)
	}
	// The status page says the same, with the reason, and still where the stream resumes.
	st := ob.status(t)
	var reason string
	for _, c := range st.Checks {
		if c.Name == checkStream && !c.OK {
			reason = c.Reason
		}
	}
	if st.Ready || st.Stream.State != "reconnecting" || !strings.Contains(st.Stream.LastError, "HTTP 503") ||
		!strings.Contains(reason, "HTTP 503") || st.Stream.ResumeAfter == "" {
		t.Errorf("/status while the stream is refused = %+v, want not ready with HTTP 503 and a resume point", st)
	}

	up.Sim().SetFaults(sim.Faults{})
	ob.waitReady(t, 10*time.Second, http.StatusOK, allReady...)

	// The upstream goes away altogether (its streams end, new ones fail), then a new instance serves.
	up.Sim().Close()
	ob.waitReady(t, 10*time.Second, http.StatusServiceUnavailable, "upstream_stream: not ready:")
	ob.requireAlive(t)
	up.Replace(sim.New(sim.Options{EventRate: 20}))
	ob.waitReady(t, 10*time.Second, http.StatusOK, allReady...)
	ob.requireAlive(t)

	if got := ob.counter(t, "bridge_stream_connects_total", nil); got < 3 {
		t.Errorf("bridge_stream_connects_total = %v, want >= 3", got)
	}
	if got := ob.counter(t, "bridge_stream_disconnects_total", map[string]string{"reason": "eof"}) +
		ob.counter(t, "bridge_stream_disconnects_total", map[string]string{"reason": "error"}); got < 2 {
		t.Errorf("bridge_stream_disconnects_total{reason=eof|error} = %v, want >= 2", got)
	}
	if got := ob.counter(t, "bridge_upstream_request_duration_seconds", map[string]string{"operation": "stream", "code": "503"}); got < 1 {
		t.Errorf("stream requests answered 503 = %v, want >= 1", got)
	}
}

// TestMetricsCountEvents: the event counters match what the upstream sent, by type, and the dead letter
// by reason.
func TestMetricsCountEvents(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	sent := map[string]int{"GATE_IN": 3, "ARRIVED": 2, "NEW_KIND": 1}
	n := 0
	for typ, count := range sent {
		for range count {
			n++
			up.Sim().Inject("demo", fmt.Sprintf("ev-%d", n), typ,
				fmt.Appendf(nil, `{"id":"ev-%d","type":%q,"timestamp":"2026-01-02T03:04:05Z"}`, n, typ))
		}
	}
	// An upstream that reuses an id: JetStream does not store it again, and it is not counted as published.
	up.Sim().Inject("demo", "ev-1", "GATE_IN", []byte(`{"id":"ev-1","type":"GATE_IN","timestamp":"2026-01-02T03:04:05Z"}`))
	up.Sim().Inject("demo", "bad-1", "", []byte("not json"))
	ob := opsStartBridge(t, up.Config(ns.URL()))

	testutil.EventuallyState(t, 15*time.Second, "every event counted", func() (bool, string) {
		got := ob.counter(t, "bridge_events_received_total", nil)
		return got == float64(n+2), fmt.Sprintf("received %v", got)
	})
	testutil.EventuallyState(t, 10*time.Second, "publishes counted by type", func() (bool, string) {
		var state []string
		ok := true
		for typ, count := range sent {
			got := ob.counter(t, "bridge_events_published_total", map[string]string{"type": typ})
			ok = ok && got == float64(count)
			state = append(state, fmt.Sprintf("%s=%v (want %d)", typ, got, count))
		}
		return ok, strings.Join(state, " ")
	})
	if got := ob.counter(t, "bridge_events_duplicates_total", nil); got != 1 {
		t.Errorf("bridge_events_duplicates_total = %v, want 1", got)
	}
	if got := ob.counter(t, "bridge_events_dead_lettered_total", map[string]string{"reason": "not_json"}); got != 1 {
		t.Errorf("bridge_events_dead_lettered_total{reason=not_json} = %v, want 1", got)
	}
	if got := ob.counter(t, "bridge_token_requests_total", map[string]string{"kind": "login", "result": "ok"}); got != 1 {
		t.Errorf("bridge_token_requests_total{kind=login,result=ok} = %v, want 1", got)
	}
	if got := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS"); got != uint64(n) {
		t.Errorf("TRACKING_EVENTS holds %d messages, want %d", got, n)
	}

	// The status page names the last event read and the resume point, which follows once the publisher
	// settles the last acknowledgement (with the next event, or its upkeep within a second).
	testutil.EventuallyState(t, 5*time.Second, "/status up to date", func() (bool, string) {
		st := ob.status(t)
		ok := st.Stream.State == "connected" && st.Stream.LastReceivedID == "bad-1" && st.Stream.ResumeAfter == "bad-1" &&
			st.Stream.Duplicates == 1 &&
			st.Stream.LastEventAt != nil && st.Stream.LastBytesAt != nil && st.NATS.Connected && st.Ready
		return ok, fmt.Sprintf("%+v", st)
	})

	// The exposition.
	code, text := ob.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	if strings.Contains(text, "bad-1") {
		t.Error("/metrics carries an event id in a label")
	}
	for _, want := range []string{
		`bridge_stream_state{state="connected"} 1`,
		"go_goroutines ", "process_cpu_seconds_total ",
		`bridge_build_info{commit="unknown",go_version="go`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Every publish is settled by the end of Run: one acknowledgement latency each.
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := ob.counter(t, "bridge_publish_ack_seconds", nil); got != float64(n+1) {
		t.Errorf("bridge_publish_ack_seconds count = %v, want %d", got, n+1)
	}
	if got := ob.b.ops.status(context.Background()).Stream.ResumeAfter; got != "bad-1" {
		t.Errorf("resume point after the final settle = %q, want bad-1", got)
	}
}

// TestHTTPAddrInUse: a taken BRIDGE_HTTP_ADDR stops the bridge with an error naming the variable.
func TestHTTPAddrInUse(t *testing.T) {
	t.Parallel()
	taken := httptest.NewServer(http.NotFoundHandler())
	defer taken.Close()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	cfg := up.Config(ns.URL(), func(c *config.Config) { c.HTTPAddr = strings.TrimPrefix(taken.URL, "http://") })
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, slog.New(slog.DiscardHandler), BuildInfo{})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "BRIDGE_HTTP_ADDR") {
		t.Fatalf("Run = %v, want an error naming BRIDGE_HTTP_ADDR", err)
	}
}

// TestHealthzMethods: only GET and HEAD are answered.
func TestHealthzMethods(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridge(t, up.Config(ns.URL()))
	resp, err := http.Post("http://"+ob.addr+"/readyz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz = %d, want 405", resp.StatusCode)
	}
	if err := ob.stop(t); err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
	if rs := ob.b.ops.live.Evaluate(context.Background()); allPass(rs) {
		t.Errorf("liveness passes after the bridge stopped: %s", formatResults(rs))
	}
}

// TestLogsOneLinePerStateChange: thousands of events make no log line at info level; every line is
// JSON (the default format).
func TestLogsOneLinePerStateChange(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	const n = 3000
	up := simtest.Start(t, false, sim.Options{EventRate: -1, EventLimit: n})
	ob := opsStartBridge(t, up.Config(ns.URL(), func(c *config.Config) { c.LogLevel = "info" }))
	testutil.EventuallyState(t, 30*time.Second, "every event stored", func() (bool, string) {
		got := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return got == n, fmt.Sprint(got)
	})
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(ob.logs.String()), "\n")
	// The parts' start-up lines, the units view's three among them; and, when the flood lasted long enough
	// for the units view to see it, the view's yielding to it and its full rate after (two state changes).
	paced := 0
	for _, l := range lines {
		if strings.Contains(l, "units view takes them: it yields") || strings.Contains(l, "units view takes events at its full rate") {
			paced++
		}
	}
	if len(lines)-paced > 23 || paced > 2 {
		t.Errorf("%d log lines for %d events (%d of the units view's pace); want a line per state change:\n%s",
			len(lines), n, paced, ob.logs)
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("not a JSON log line: %q", l)
			continue
		}
		if rec["level"] == "DEBUG" {
			t.Errorf("debug line at level info: %q", l)
		}
	}
}

// opsWireConsumer wires a report consumer into b the way daemon.go does it once the consumer is part
// of the daemon: on the bridge's NATS connection, with the bridge's token source, an instrumented HTTP
// client and the metrics observer (readiness follows the daemon's own consumer). It runs until the
// bridge is stopped, and stops before it.
func opsWireConsumer(t *testing.T, ob *opsBridge) {
	t.Helper()
	b := ob.b
	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	client, err := upstream.NewHTTPClient(upstream.ClientOptions{Timeout: b.cfg.HTTPTimeout})
	if err != nil {
		t.Fatal(err)
	}
	b.ops.instrument(client)
	c := consume.New(js, upstream.NewReportClient(upstream.ReportConfig{
		URL: b.cfg.ReportURL(), Tokens: b.token.src, Client: client, Logger: b.log.With("component", "report"),
	}), consume.Config{
		Stream:     b.layout.Reports(),
		Durable:    b.cfg.ReportDurable,
		Subject:    b.layout.ReportsSubject(),
		DLQSubject: b.layout.ReportsDLQSubject(),
		DLQStream:  b.layout.DLQ(),
		BackoffMin: 100 * time.Millisecond,
		BackoffMax: time.Second,
		Logger:     b.log.With("component", "reports"),
		Observer:   b.ops.metrics.reports,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	ob.beforeStop = append(ob.beforeStop, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer Run: %v", err)
		}
	})
}

// opsReport returns a valid report about a position the simulator tracks for user demo.
func opsReport(up *simtest.Upstream, i int) []byte {
	o := up.Sim().TrackedOrders("demo")[0]
	return fmt.Appendf(nil, `{"order":{"orderId":%q,"positionId":%q},"transport":{"identifier":"truck-7"},`+
		`"event":{"timestamp":"2026-05-01T12:00:%02dZ","type":"GATE_IN","observation":{"observedMeansOfTransport":`+
		`{"modeOfTransport":"TRUCK","truck":{"countryCode":"DE","licensePlate":"HH-TB %d"}},"observedLoadingUnit":`+
		`{"loadingUnit":{"containerClass":"CONTAINER","number":"MSCU1234565"},"loadingState":"FULL"}}},`+
		`"reporter":{"id":"op-1","name":"Test Operator"}}`, o.OrderID, o.PositionID, i%60, i)
}

// opsPublishReports publishes reports to P.reports with JetStream.
func opsPublishReports(t *testing.T, natsURL string, reports [][]byte, opts ...nats.Option) {
	t.Helper()
	nc, err := nats.Connect(natsURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for i, r := range reports {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.Publish(ctx, "tracking.reports", r, jetstream.WithMsgID(fmt.Sprintf("report-%d", i)))
		cancel()
		if err != nil {
			t.Fatalf("publishing report %d: %v", i, err)
		}
	}
}

// TestMetricsCountReports: the report counters match what the test sent, by outcome and status class;
// the consumer is part of /readyz and its backlog of bridge_reports_pending.
func TestMetricsCountReports(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	up.Sim().SetFaults(sim.Faults{RejectReports: func(body []byte) (int, []string, bool) {
		if bytes.Contains(body, []byte("HH-TB 99")) {
			return http.StatusConflict, []string{"order no longer open"}, true
		}
		return 0, nil, false
	}})
	ob := opsStartBridgeWith(t, up.Config(ns.URL()), func(ob *opsBridge) { opsWireConsumer(t, ob) })
	ob.waitReady(t, 15*time.Second, http.StatusOK, append(allReady, "report_consumer: ok")...)

	reports := [][]byte{opsReport(up, 1), opsReport(up, 2), opsReport(up, 3), opsReport(up, 99), []byte(`{"event":{}}`)}
	opsPublishReports(t, ns.URL(), reports)
	want := map[[2]string]float64{
		{"accepted", "2xx"}: 3,
		{"rejected", "4xx"}: 1,
		{"invalid", "none"}: 1,
	}
	testutil.EventuallyState(t, 15*time.Second, "report outcomes counted", func() (bool, string) {
		ok := true
		var state []string
		for k, n := range want {
			got := ob.counter(t, "bridge_reports_outcomes_total", map[string]string{"outcome": k[0], "status_class": k[1]})
			ok = ok && got == n
			state = append(state, fmt.Sprintf("%s/%s=%v", k[0], k[1], got))
		}
		return ok, strings.Join(state, " ")
	})
	if got := ob.counter(t, "bridge_reports_consumed_total", nil); got != 5 {
		t.Errorf("bridge_reports_consumed_total = %v, want 5", got)
	}
	if got := len(up.Sim().Reports("demo")); got != 3 {
		t.Errorf("the upstream accepted %d reports, want 3", got)
	}
	if got := ob.counter(t, "bridge_upstream_request_duration_seconds", map[string]string{"operation": "report", "code": "202"}); got != 3 {
		t.Errorf("report requests answered 202 = %v, want 3", got)
	}
	if got := opsStreamMsgs(t, ns.URL(), "TRACKING_DLQ"); got != 2 {
		t.Errorf("TRACKING_DLQ holds %d, want 2", got)
	}
	testutil.EventuallyState(t, 15*time.Second, "the backlog drained", func() (bool, string) {
		_, text := ob.get(t, "/metrics")
		return strings.Contains(text, "\nbridge_reports_pending 0\n"), "bridge_reports_pending not 0"
	})
}

// TestReadyzWhileTokenExpiresUnused: an access token that expires while the stream stays connected (no
// request needs a new one) does not make the bridge unready; a failing token endpoint does.
func TestReadyzWhileTokenExpiresUnused(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{EventRate: 20, AccessTTL: time.Second})
	ob := opsStartBridge(t, up.Config(ns.URL()))
	ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	testutil.EventuallyState(t, 10*time.Second, "the access token expired", func() (bool, string) {
		return !ob.b.token.src.Valid(), "still valid"
	})
	if code, body := ob.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d after the unused token expired:\n%s", code, body)
	}

	// Now the stream needs a token and the token endpoint fails.
	up.Sim().SetFaults(sim.Faults{TokenErrorRate: 1, DropEvery: 1})
	ob.waitReady(t, 10*time.Second, http.StatusServiceUnavailable, "upstream_token: not ready: no valid access token: token endpoint unavailable")
	up.Sim().SetFaults(sim.Faults{})
	ob.waitReady(t, 10*time.Second, http.StatusOK, allReady...)
}

// TestStopDuringNATSOutageKeepsShutdownTimeout: SIGTERM while NATS is away, events in flight and the
// report consumer running: the bridge returns within BRIDGE_SHUTDOWN_TIMEOUT (plus a little), counted
// from the signal, instead of waiting for each part in turn (10-15 s with a 2 s timeout before). Nothing
// is lost: what was not acknowledged is sent again after the restart.
func TestStopDuringNATSOutageKeepsShutdownTimeout(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{EventRate: 200})
	ob := opsStartBridge(t, up.Config(ns.URL(), func(c *config.Config) { c.ShutdownTimeout = 2 * time.Second }))
	ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	testutil.EventuallyState(t, 10*time.Second, "events flowing", func() (bool, string) {
		n := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return n >= 20, fmt.Sprint(n)
	})
	ns.Stop()
	testutil.EventuallyState(t, 10*time.Second, "the bridge sees NATS gone", func() (bool, string) {
		return !ob.b.nc.IsConnected(), ob.b.nc.Status().String()
	})
	start := time.Now()
	ob.cancel()
	select {
	case <-ob.done:
		if d := time.Since(start); d > 7*time.Second { // generous: a loaded machine; the fault took 12 s
			t.Errorf("the bridge took %v to stop with BRIDGE_SHUTDOWN_TIMEOUT=2s", d.Round(time.Millisecond))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the bridge did not stop within 30 s\n%s", ob.logs)
	}
	ob.done <- nil
}
