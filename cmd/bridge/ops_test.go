package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/embedded"
	"github.com/tracking-bridge/tracking-bridge/internal/health"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
)

// The helpers of the operations tests carry an "ops" prefix: other test files of this package have
// their own.

// opsNATS is an embedded NATS server that can be stopped and started again on the same port and store.
type opsNATS struct {
	t         *testing.T
	dir       string
	port      int
	configure func(*server.Options)
	srv       *server.Server
}

func opsStartNATS(t *testing.T, configure func(*server.Options)) *opsNATS {
	t.Helper()
	n := &opsNATS{t: t, dir: t.TempDir(), port: -1, configure: configure}
	n.start()
	n.port = n.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(n.stop)
	return n
}

func (n *opsNATS) start() {
	n.t.Helper()
	s, err := embedded.Start(embedded.Options{StoreDir: n.dir, Port: n.port, Configure: n.configure})
	if err != nil {
		n.t.Fatal(err)
	}
	n.srv = s
}

func (n *opsNATS) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

func (n *opsNATS) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// opsUpstream serves a simulator that can be replaced (a new instance after Close), over HTTP or TLS. It
// records the access and refresh tokens the token endpoint hands out.
type opsUpstream struct {
	srv    *httptest.Server
	cur    atomic.Pointer[sim.Server]
	mu     sync.Mutex
	tokens []string
}

func opsStartUpstream(t *testing.T, tlsServer bool, o sim.Options) *opsUpstream {
	t.Helper()
	u := &opsUpstream{}
	u.cur.Store(sim.New(o))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := u.cur.Load()
		if r.URL.Path != sim.TokenPath {
			s.Handler().ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		u.recordTokens(rec.Body.Bytes())
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
	if tlsServer {
		u.srv = httptest.NewTLSServer(h)
	} else {
		u.srv = httptest.NewServer(h)
	}
	t.Cleanup(func() {
		u.cur.Load().Close()
		u.srv.CloseClientConnections()
		u.srv.Close()
	})
	return u
}

// recordTokens keeps the access_token and refresh_token values of a token response.
func (u *opsUpstream) recordTokens(body []byte) {
	for _, key := range []string{`"access_token":"`, `"refresh_token":"`} {
		if _, rest, ok := bytes.Cut(body, []byte(key)); ok {
			if v, _, ok := bytes.Cut(rest, []byte(`"`)); ok && len(v) > 0 {
				u.mu.Lock()
				u.tokens = append(u.tokens, string(v))
				u.mu.Unlock()
			}
		}
	}
}

func (u *opsUpstream) issuedTokens() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.tokens...)
}

func (u *opsUpstream) sim() *sim.Server { return u.cur.Load() }

// opsLogs is a concurrency-safe log sink.
type opsLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *opsLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *opsLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// opsBridge is a bridge running in the test, configured through BRIDGE_* variables as a user would.
type opsBridge struct {
	b      *bridge
	logs   *opsLogs
	cancel context.CancelFunc
	done   chan error
	addr   string
}

// opsEnv returns the variables of a bridge against upstream u and NATS at natsURL, with short reconnect
// delays; extra overrides them ("" removes one).
func opsEnv(u *opsUpstream, natsURL string, extra map[string]string) map[string]string {
	env := map[string]string{
		"BRIDGE_UPSTREAM_URL":     u.srv.URL + sim.DefaultBasePath,
		"BRIDGE_TOKEN_URL":        u.srv.URL + sim.TokenPath,
		"BRIDGE_CLIENT_ID":        sim.DefaultClientID,
		"BRIDGE_USERNAME":         "demo",
		"BRIDGE_PASSWORD":         "demo",
		"BRIDGE_INSECURE_HTTP":    "true",
		"BRIDGE_NATS_URL":         natsURL,
		"BRIDGE_HTTP_ADDR":        "127.0.0.1:0",
		"BRIDGE_LOG_LEVEL":        "debug",
		"BRIDGE_RECONNECT_MIN":    "100ms",
		"BRIDGE_RECONNECT_MAX":    "500ms",
		"BRIDGE_LOGIN_RETRY":      "1s",
		"BRIDGE_SHUTDOWN_TIMEOUT": "5s",
	}
	for k, v := range extra {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	return env
}

// opsStartBridge builds and runs a bridge; it waits until its HTTP endpoint listens. The bridge is
// stopped at the end of the test.
func opsStartBridge(t *testing.T, env map[string]string) *opsBridge {
	t.Helper()
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("configuration: %v", err)
	}
	logs := &opsLogs{}
	log := newLogger(logs, cfg.LogFormat, cfg.SlogLevel())
	b, err := newBridge(cfg, log)
	if err != nil {
		t.Fatalf("newBridge: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ob := &opsBridge{b: b, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { ob.done <- b.Run(ctx) }()
	t.Cleanup(func() { ob.stop(t) })
	opsEventually(t, 10*time.Second, "HTTP endpoint listening", func() (bool, string) {
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
	opsEventually(t, timeout, fmt.Sprintf("/readyz %d with %q", want, lines), func() (bool, string) {
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

// requireAlive checks that /healthz answers 200.
func (ob *opsBridge) requireAlive(t *testing.T) {
	t.Helper()
	if code, body := ob.get(t, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d %q, want 200", code, body)
	}
}

// counter returns the value of a counter (or gauge) with the given labels from the bridge's registry.
func (ob *opsBridge) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := ob.b.ops.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if opsLabelsMatch(m, labels) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
	}
	return 0
}

func opsLabelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// opsEventually polls cond every 50 ms until it holds or timeout passes; cond's second result describes
// the last state for the failure message.
func opsEventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last state:\n%s", timeout, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// opsStreamMsgs returns the number of messages in a JetStream stream.
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

var allReady = []string{"nats: ok", "jetstream_streams: ok", "upstream_token: ok", "upstream_stream: ok"}

// TestReadyzFollowsNATS: /readyz turns 503 naming NATS within seconds of the server stopping and 200
// again after it is back; /healthz stays 200 throughout.
func TestReadyzFollowsNATS(t *testing.T) {
	ns := opsStartNATS(t, nil)
	up := opsStartUpstream(t, false, sim.Options{EventRate: 20})
	ob := opsStartBridge(t, opsEnv(up, ns.url(), nil))

	ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	ob.requireAlive(t)

	ns.stop()
	start := time.Now()
	body := ob.waitReady(t, 5*time.Second, http.StatusServiceUnavailable, "nats: not ready:")
	t.Logf("not ready after %v:\n%s", time.Since(start).Round(time.Millisecond), body)
	ob.requireAlive(t)
	if ob.counter(t, "bridge_nats_connected", nil) != 0 {
		t.Error("bridge_nats_connected should be 0 while NATS is down")
	}

	ns.start()
	ob.waitReady(t, 20*time.Second, http.StatusOK, allReady...)
	ob.requireAlive(t)
	if got := ob.counter(t, "bridge_nats_reconnects_total", nil); got < 1 {
		t.Errorf("bridge_nats_reconnects_total = %v, want >= 1", got)
	}
}

// TestReadyzFollowsUpstreamStream: /readyz turns 503 naming the stream while the upstream answers the
// stream 503, or is closed, and 200 again once it serves it; /healthz stays 200.
func TestReadyzFollowsUpstreamStream(t *testing.T) {
	ns := opsStartNATS(t, nil)
	up := opsStartUpstream(t, false, sim.Options{EventRate: 20})
	ob := opsStartBridge(t, opsEnv(up, ns.url(), nil))
	ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)

	// 503 to new stream connections; the open one is dropped after its next event.
	up.sim().SetFaults(sim.Faults{StreamStatus: http.StatusServiceUnavailable, DropEvery: 1})
	start := time.Now()
	body := ob.waitReady(t, 10*time.Second, http.StatusServiceUnavailable, "upstream_stream: not ready: reconnecting: HTTP 503")
	t.Logf("not ready after %v:\n%s", time.Since(start).Round(time.Millisecond), body)
	ob.requireAlive(t)
	if got := ob.counter(t, "bridge_stream_state", map[string]string{"state": "reconnecting"}); got != 1 {
		t.Errorf("bridge_stream_state{state=reconnecting} = %v, want 1", got)
	}

	up.sim().SetFaults(sim.Faults{})
	ob.waitReady(t, 10*time.Second, http.StatusOK, allReady...)

	// The upstream goes away altogether (its streams end, new ones fail), then a new instance serves.
	up.sim().Close()
	ob.waitReady(t, 10*time.Second, http.StatusServiceUnavailable, "upstream_stream: not ready:")
	ob.requireAlive(t)
	up.cur.Store(sim.New(sim.Options{EventRate: 20}))
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
	ns := opsStartNATS(t, nil)
	up := opsStartUpstream(t, false, sim.Options{})
	sent := map[string]int{"GATE_IN": 3, "ARRIVED": 2, "NEW_KIND": 1}
	n := 0
	for typ, count := range sent {
		for range count {
			n++
			up.sim().Inject("demo", fmt.Sprintf("ev-%d", n), typ,
				fmt.Appendf(nil, `{"id":"ev-%d","type":%q,"timestamp":"2026-01-02T03:04:05Z"}`, n, typ))
		}
	}
	up.sim().Inject("demo", "bad-1", "", []byte("not json"))
	ob := opsStartBridge(t, opsEnv(up, ns.url(), nil))

	opsEventually(t, 15*time.Second, "every event counted", func() (bool, string) {
		got := ob.counter(t, "bridge_events_received_total", nil)
		return got == float64(n+1), fmt.Sprintf("received %v", got)
	})
	opsEventually(t, 10*time.Second, "publishes counted by type", func() (bool, string) {
		var state []string
		ok := true
		for typ, count := range sent {
			got := ob.counter(t, "bridge_events_published_total", map[string]string{"type": typ})
			ok = ok && got == float64(count)
			state = append(state, fmt.Sprintf("%s=%v (want %d)", typ, got, count))
		}
		return ok, strings.Join(state, " ")
	})
	if got := ob.counter(t, "bridge_events_dead_lettered_total", map[string]string{"reason": "not_json"}); got != 1 {
		t.Errorf("bridge_events_dead_lettered_total{reason=not_json} = %v, want 1", got)
	}
	if got := ob.counter(t, "bridge_token_requests_total", map[string]string{"kind": "login", "result": "ok"}); got != 1 {
		t.Errorf("bridge_token_requests_total{kind=login,result=ok} = %v, want 1", got)
	}
	if got := opsStreamMsgs(t, ns.url(), "TRACKING_EVENTS"); got != uint64(n) {
		t.Errorf("TRACKING_EVENTS holds %d messages, want %d", got, n)
	}

	// The exposition: the info metric names the last event, read and stored.
	code, text := ob.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		`bridge_last_event_info{received_id="bad-1",stored_id=`,
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
	if got := ob.counter(t, "bridge_publish_ack_seconds", nil); got != float64(n) {
		t.Errorf("bridge_publish_ack_seconds count = %v, want %d", got, n)
	}
	if got := ob.counter(t, "bridge_last_event_info", map[string]string{"received_id": "bad-1", "stored_id": "bad-1"}); got != 1 {
		t.Errorf("bridge_last_event_info{received_id=bad-1,stored_id=bad-1} missing after the final settle")
	}
}

// TestHTTPAddrInUse: a taken BRIDGE_HTTP_ADDR stops the bridge with an error naming the variable.
func TestHTTPAddrInUse(t *testing.T) {
	taken := httptest.NewServer(http.NotFoundHandler())
	defer taken.Close()
	ns := opsStartNATS(t, nil)
	up := opsStartUpstream(t, false, sim.Options{})
	env := opsEnv(up, ns.url(), map[string]string{"BRIDGE_HTTP_ADDR": strings.TrimPrefix(taken.URL, "http://")})
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	b, err := newBridge(cfg, slog.New(slog.DiscardHandler))
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
	ns := opsStartNATS(t, nil)
	up := opsStartUpstream(t, false, sim.Options{})
	ob := opsStartBridge(t, opsEnv(up, ns.url(), nil))
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
	if rs := ob.b.ops.live.Evaluate(context.Background()); health.Ready(rs) {
		t.Errorf("liveness passes after the bridge stopped: %s", health.Format(rs))
	}
}
