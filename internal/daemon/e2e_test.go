package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestMain lets the test binary act as the bridge process (for the kill -9 test): with
// DAEMON_TEST_AS_BRIDGE=1 it runs the daemon as 'bridge run' does, configured from the environment, and
// exits 0 after a stop by SIGTERM, non-zero on failure. The switch is not named BRIDGE_*: the bridge
// refuses a BRIDGE_* variable it does not know.
func TestMain(m *testing.M) {
	if os.Getenv("DAEMON_TEST_AS_BRIDGE") == "1" {
		os.Exit(runAsBridge())
	}
	os.Exit(m.Run())
}

func runAsBridge() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	d, err := New(cfg, logging.New(os.Stderr, cfg.LogFormat, cfg.SlogLevel()), BuildInfo{})
	if err == nil {
		err = d.Run(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

const testPassword = "s3cret-Pa55word-do-not-log"

// harness is one end-to-end set-up: the simulator over HTTP on loopback, an embedded nats-server with
// JetStream, and the configuration of a bridge between them, which a test adjusts before it starts one.
type harness struct {
	t    *testing.T
	sim  *sim.Server
	http *httptest.Server
	ns   *testutil.NATS
	cfg  *config.Config
	logs *testutil.Buffer
	// bridge is the one startBridge started last.
	bridge *Daemon
	// loginRetry, when set, replaces LoginRetry after validation: tests measure the pace of
	// rejected logins in seconds, below the config.MinLoginRetry users may set.
	loginRetry time.Duration
}

func newHarness(t *testing.T, o sim.Options) *harness {
	t.Helper()
	if o.Users == nil {
		o.Users = map[string]string{"demo": testPassword}
	}
	h := &harness{t: t, logs: &testutil.Buffer{}}
	h.sim = sim.New(o)
	h.http = httptest.NewServer(h.sim.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = h.sim.Run(ctx) }()
	h.ns = testutil.StartNATS(t, nil)
	h.cfg = config.Default()
	h.cfg.UpstreamURL = h.http.URL + sim.DefaultBasePath
	h.cfg.TokenURL = h.http.URL + sim.TokenPath
	h.cfg.ClientID = sim.DefaultClientID
	h.cfg.Username, h.cfg.Password = "demo", testPassword
	h.cfg.InsecureHTTP = true
	h.cfg.NATSURL = h.ns.URL()
	h.cfg.HTTPAddr = "127.0.0.1:0"
	h.cfg.ReconnectMin, h.cfg.ReconnectMax = 10*time.Millisecond, 200*time.Millisecond
	h.cfg.StreamIdleTimeout = 5 * time.Second
	h.cfg.LogLevel = "debug"
	// Short, so that JetStream's deduplication cannot hide a second publish of an event from the
	// exactly-once checks: the bridge's own cursor and skip lists must keep the stream exact.
	h.cfg.DuplicateWindow = 100 * time.Millisecond
	// A bridge stopped without releasing the lease (a crash) is replaced after this.
	h.cfg.LeaseTTL = 2 * time.Second
	t.Cleanup(func() {
		cancel()
		h.sim.Close()
		h.http.Close()
		if t.Failed() {
			t.Logf("bridge logs:\n%s", h.logs.String())
		}
	})
	return h
}

func (h *harness) config() *config.Config {
	h.t.Helper()
	cfg := *h.cfg
	if err := cfg.Validate(); err != nil {
		h.t.Fatal(err)
	}
	if h.loginRetry > 0 {
		cfg.LoginRetry = h.loginRetry
	}
	return &cfg
}

// startBridge runs a bridge in-process; stop cancels it and waits for Run to return.
func (h *harness) startBridge() (stop func() error) {
	h.t.Helper()
	b, err := New(h.config(), logging.New(h.logs, "json", -4), BuildInfo{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.bridge = b
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(testutil.Scale(30 * time.Second)):
				runErr = fmt.Errorf("bridge did not stop within %v", testutil.Scale(30*time.Second))
			}
		})
		return runErr
	}
	h.t.Cleanup(func() { _ = stop() })
	return stop
}

// js returns a JetStream context on a fresh connection.
func (h *harness) js() jetstream.JetStream {
	h.t.Helper()
	js, _ := jetstream.New(h.ns.Connect())
	return js
}

// storedCount returns the number of messages in a stream but fence markers (0 while it does not exist,
// or cannot be asked).
func (h *harness) storedCount(stream string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	nc, err := nats.Connect(h.ns.URL())
	if err != nil {
		return 0
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	n, _ := testutil.CountMsgs(ctx, js, stream)
	return int(n)
}

// stored returns every message of a stream but fence markers, in order.
func (h *harness) stored(stream string) []jetstream.Msg {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	js := h.js()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		h.t.Fatal(err)
	}
	want := int(s.CachedInfo().State.Msgs)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < want {
		batch, err := c.Fetch(min(1000, want-len(out)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			h.t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil {
			h.t.Fatal(err)
		}
	}
	return slices.DeleteFunc(out, func(m jetstream.Msg) bool { return testutil.IsFence(m.Subject()) })
}

// waitStored waits until a stream holds n messages, failing when its count has not grown for stall (a
// busy machine stores thousands of events several times slower than an idle one).
func (h *harness) waitStored(stream string, n int, stall time.Duration) {
	h.t.Helper()
	testutil.EventuallyCount(h.t, stall, fmt.Sprintf("%s holds %d messages", stream, n), n, func() int {
		return h.storedCount(stream)
	})
}

// waitResumeAfter waits until the running bridge's resume point is id: everything up to it is stored, and
// the next message names it in Bridge-Resume-After.
func (h *harness) waitResumeAfter(id string) {
	h.t.Helper()
	testutil.Eventually(h.t, 20*time.Second, "resume point "+id, func() bool {
		return h.bridge.events.ResumeAfter() == id
	})
}

// assertGenerated checks that the events stream holds each of the first n generated events exactly once,
// with its data byte for byte.
func (h *harness) assertGenerated(n int) {
	h.t.Helper()
	msgs := h.stored("TRACKING_EVENTS")
	byID := map[string][]byte{}
	for _, m := range msgs {
		id := m.Headers().Get("Nats-Msg-Id")
		if _, dup := byID[id]; dup {
			h.t.Errorf("event %s stored twice", id)
		}
		byID[id] = m.Data()
	}
	for seq := 1; seq <= n; seq++ {
		id, data := h.sim.GeneratedEvent("demo", seq)
		got, ok := byID[id]
		if !ok {
			h.t.Errorf("event %s (seq %d) missing", id, seq)
			continue
		}
		if !bytes.Equal(got, data) {
			h.t.Errorf("event %s stored as %q, want %q", id, got, data)
		}
	}
	if len(msgs) != n {
		h.t.Errorf("events stream holds %d messages, want %d", len(msgs), n)
	}
}

// TestEndToEndTypesAndOddPayloads: every event type lands on its subject with the headers of
// docs/subjects.md#event-headers, new and odd types pass through safely, and bad payloads are dead-lettered,
// never lost.
func TestEndToEndTypesAndOddPayloads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sim.Options{})
	types := []string{"GATE_OUT", "GATE_IN", "ARRIVED", "DEPARTED", "HANDLING_STARTED", "HANDLING_FINISHED",
		"UNKNOWN", "LOADED_ON_BARGE", "a.b", "*", ">", "GATE IN", "X\r\nY", ""}
	want := map[string]string{"a.b": "a_b", "*": "_", ">": "_", "GATE IN": "GATE_IN", "X\r\nY": "X__Y", "": "UNKNOWN"}
	for i, typ := range types {
		data, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("t-%02d", i), "timestamp": "2026-11-22T10:00:00Z",
			"type": typ, "observation": map[string]any{"note": "unknown fields pass through"}})
		h.sim.Inject("demo", fmt.Sprintf("t-%02d", i), typ, data)
	}
	h.sim.Inject("demo", "t-missing", "", []byte(`{"timestamp":"2026-11-22T10:00:00Z"}`))
	h.sim.Inject("demo", "t-number", "", []byte(`{"type":7}`))
	h.sim.Inject("demo", "t-notjson", "", []byte("GATE_IN at 10:00, not JSON"))
	h.sim.Inject("demo", "t-last", "GATE_IN", []byte(`{"type":"GATE_IN","timestamp":"2026-11-22T10:00:00Z"}`))
	h.startBridge()
	h.waitStored("TRACKING_EVENTS", len(types)+3, 20*time.Second)
	h.waitStored("TRACKING_DLQ", 1, 5*time.Second)

	msgs := h.stored("TRACKING_EVENTS")
	for i, typ := range types {
		m := msgs[i]
		token, ok := want[typ]
		if !ok {
			token = typ
		}
		if m.Subject() != "tracking.events."+token+"._" { // no unit named
			t.Errorf("type %q on %q, want tracking.events.%s._", typ, m.Subject(), token)
		}
		hd := m.Headers()
		id := fmt.Sprintf("t-%02d", i)
		if hd.Get("Nats-Msg-Id") != id || hd.Get("Tracking-Event-Id") != id || hd.Get("ce-id") != id ||
			hd.Get("Content-Type") != "application/json" || hd.Get("ce-specversion") != "1.0" ||
			hd.Get("ce-time") != "2026-11-22T10:00:00Z" || !strings.HasPrefix(hd.Get("ce-source"), "http://127.0.0.1") {
			t.Errorf("type %q headers %v", typ, hd)
		}
		if typ != "" && hd.Get("Tracking-Event-Type") != strings.NewReplacer("\r", "", "\n", "").Replace(typ) {
			t.Errorf("Tracking-Event-Type = %q for %q", hd.Get("Tracking-Event-Type"), typ)
		}
		if !strings.Contains(string(m.Data()), "unknown fields pass through") {
			t.Errorf("body changed: %s", m.Data())
		}
	}
	for i, subj := range []string{"tracking.events.UNKNOWN._", "tracking.events.UNKNOWN._", "tracking.events.GATE_IN._"} {
		if got := msgs[len(types)+i].Subject(); got != subj {
			t.Errorf("message %d on %s, want %s", len(types)+i, got, subj)
		}
	}
	dlq := h.stored("TRACKING_DLQ")
	if len(dlq) != 1 || dlq[0].Subject() != "tracking.dlq.events" || string(dlq[0].Data()) != "GATE_IN at 10:00, not JSON" ||
		!strings.Contains(dlq[0].Headers().Get("Bridge-Error"), "not a JSON object") {
		t.Fatalf("dead letters: %d %v", len(dlq), dlq)
	}
}

// TestEndToEndCutsMidEvent: the upstream cuts the connection in the middle of an event, over and over.
// No partial event is published, each reconnect resumes from the last stored event, and every event is
// stored exactly once.
func TestEndToEndCutsMidEvent(t *testing.T) {
	t.Parallel()
	const n = 3000
	h := newHarness(t, sim.Options{EventRate: -1, EventLimit: n, Faults: sim.Faults{DropEvery: 97, DropMidEvent: true}})
	h.startBridge()
	h.waitStored("TRACKING_EVENTS", n, 60*time.Second)
	h.assertGenerated(n)
	st := h.sim.Stats()
	if st.StreamConnects < n/97 {
		t.Errorf("only %d connections for %d events cut every 97", st.StreamConnects, n)
	}
	// Each reconnect asked to resume after an event that was stored; they only move forward.
	prev := ""
	for _, id := range st.LastEventIDs[1:] {
		if id <= prev {
			t.Errorf("Last-Event-ID %q after %q", id, prev)
		}
		prev = id
	}
}

// TestEndToEndTokenExpiry: access tokens expire every second and the refresh token after three while
// the stream runs and reconnects; the bridge refreshes, logs in again, and loses nothing.
func TestEndToEndTokenExpiry(t *testing.T) {
	t.Parallel()
	const n = 2400
	h := newHarness(t, sim.Options{EventRate: 400, EventLimit: n, AccessTTL: time.Second, RefreshTTL: 3 * time.Second,
		Faults: sim.Faults{DropEvery: 150}})
	h.startBridge()
	testutil.Eventually(t, 20*time.Second, "half the events", func() bool { return h.storedCount("TRACKING_EVENTS") >= n/2 })
	// Both tokens die: the refresh is refused and the bridge logs in again with the password.
	h.sim.ExpireTokens()
	h.sim.ExpireRefreshTokens()
	h.waitStored("TRACKING_EVENTS", n, 30*time.Second)
	h.assertGenerated(n)
	st := h.sim.Stats()
	// Whether the next connection meets a 401 or the bridge refreshes first is a matter of timing; the
	// 401 path is covered by TestStreamRetriesAfter401And5xx and TestSecretsNeverLeak.
	if st.TokenRequests["password"] < 2 || st.TokenRequests["refresh_token"] < 1 {
		t.Errorf("token requests %v: want refreshes and a re-login after the refresh token died", st.TokenRequests)
	}
	if strings.Contains(h.logs.String(), testPassword) {
		t.Error("password in the logs")
	}
}

// TestEndToEndNATSRestart: nats-server stops and starts again during a burst; every event exactly once.
func TestEndToEndNATSRestart(t *testing.T) {
	t.Parallel()
	const n = 20000
	h := newHarness(t, sim.Options{EventRate: -1, EventLimit: n})
	h.startBridge()
	testutil.Eventually(t, 30*time.Second, "a quarter of the events", func() bool { return h.storedCount("TRACKING_EVENTS") >= n/4 })
	h.ns.Restart()
	h.waitStored("TRACKING_EVENTS", n, 60*time.Second)
	h.assertGenerated(n)
}

// TestEndToEndBridgeRestart: the bridge is stopped mid-stream and started again; every event exactly once.
func TestEndToEndBridgeRestart(t *testing.T) {
	t.Parallel()
	const n = 1500
	h := newHarness(t, sim.Options{EventRate: 300, EventLimit: n})
	stop := h.startBridge()
	testutil.Eventually(t, 20*time.Second, "some events", func() bool { return h.storedCount("TRACKING_EVENTS") >= 300 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	h.startBridge()
	h.waitStored("TRACKING_EVENTS", n, 30*time.Second)
	h.assertGenerated(n)
}

// TestEndToEndRestartAfterMessageWithoutID: the newest stored event came in an SSE message without an id:
// line, so the upstream replays it after a restart (Last-Event-ID is the id before it). Past the duplicate
// window, only the resume cursor keeps it from being stored twice.
func TestEndToEndRestartAfterMessageWithoutID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sim.Options{})
	stop := h.startBridge()
	h.sim.Inject("demo", "ev-a", "GATE_IN", []byte(`{"id":"ev-a","type":"GATE_IN"}`))
	h.waitResumeAfter("ev-a")
	h.sim.Inject("demo", "", "GATE_OUT", []byte(`{"id":"x-1","type":"GATE_OUT"}`))
	h.waitStored("TRACKING_EVENTS", 2, 20*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past the duplicate window

	h.startBridge()
	h.sim.Inject("demo", "ev-b", "ARRIVED", []byte(`{"id":"ev-b","type":"ARRIVED"}`))
	if ids := h.idsUntil("TRACKING_EVENTS", "ev-b"); fmt.Sprint(ids) != "[ev-a x-1 ev-b]" {
		t.Fatalf("stored %v, want [ev-a x-1 ev-b]", ids)
	}
}

// TestEndToEndReconnectAfterMessageWithoutID: as TestEndToEndRestartAfterMessageWithoutID, for a
// reconnect of a running bridge (here after the idle timeout) that comes past the duplicate window.
func TestEndToEndReconnectAfterMessageWithoutID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sim.Options{Heartbeat: -1})
	h.cfg.StreamIdleTimeout = time.Second
	h.startBridge()
	h.sim.Inject("demo", "ev-a", "GATE_IN", []byte(`{"id":"ev-a","type":"GATE_IN"}`))
	h.waitResumeAfter("ev-a")
	h.sim.Inject("demo", "", "GATE_OUT", []byte(`{"id":"x-1","type":"GATE_OUT"}`))
	h.waitStored("TRACKING_EVENTS", 2, 20*time.Second)
	connects := h.sim.Stats().StreamConnects
	// An idle reconnect after ev-a (no heartbeats: the idle timeout fires), past the duplicate window.
	testutil.Eventually(t, 20*time.Second, "an idle reconnect", func() bool {
		return h.sim.Stats().StreamConnects > connects
	})
	h.sim.Inject("demo", "ev-b", "ARRIVED", []byte(`{"id":"ev-b","type":"ARRIVED"}`))
	if ids := h.idsUntil("TRACKING_EVENTS", "ev-b"); fmt.Sprint(ids) != "[ev-a x-1 ev-b]" {
		t.Fatalf("stored %v, want [ev-a x-1 ev-b]", ids)
	}
}

// TestEndToEndFrozenNATS: the NATS server stops reading and answering without closing the connection, as
// a frozen process or a black-holed network does, while events flood in. The bridge's writes fill the
// socket buffers and nats.go's flusher blocks in a write holding the connection's lock. Even so the
// health endpoints answer (they do not take that lock), a write times out after BRIDGE_PUBLISH_TIMEOUT
// (nats.go's default is a minute) so that the client reconnects and a stop keeps to the shutdown
// timeout, and once the server is back every event is stored exactly once.
func TestEndToEndFrozenNATS(t *testing.T) {
	t.Parallel()
	// 30 MB of events. The proxy's receive buffer is held at 64 KB, where loopback autotuning would grow
	// it to tens of MB, so that the buffers on the way (with the bridge's send buffer, 4 MB at most) hold
	// a few MB: what the bridge writes after the freeze outruns them several times over.
	const n = 1000
	frozen := func(t *testing.T, publishTimeout time.Duration) (*harness, *testutil.Proxy, func() error) {
		h := newHarness(t, sim.Options{EventRate: -1, EventLimit: n, EventSize: 30000})
		px := testutil.StartProxy(t, h.ns.URL())
		px.LimitReceiveBuffer(64 << 10)
		h.cfg.NATSURL = px.URL()
		h.cfg.PublishTimeout = publishTimeout
		h.cfg.ShutdownTimeout = 2 * time.Second
		// A window of more events than the test sends: nothing but the frozen server stops the writes.
		h.cfg.PublishWindow = 4096
		// What the bridge wrote before the freeze waits in the frozen server's socket buffer and is
		// stored when it thaws, possibly after the bridge sent it again: only the duplicate window tells
		// those apart (as in front of a real frozen server).
		h.cfg.DuplicateWindow = time.Minute
		stop := h.startBridge()
		h.waitStored("TRACKING_EVENTS", 200, 30*time.Second)
		px.Freeze()
		return h, px, stop
	}

	t.Run("the endpoints answer", func(t *testing.T) {
		t.Parallel()
		// A long write timeout: the lock stays held for the whole freeze.
		h, px, _ := frozen(t, 30*time.Second)
		addr := h.bridge.ops.httpAddr()
		get := func(path string, within time.Duration) error {
			client := &http.Client{Timeout: within}
			resp, err := client.Get("http://" + addr + path)
			if err != nil {
				return fmt.Errorf("GET %s while NATS is frozen: %w", path, err)
			}
			_ = resp.Body.Close()
			if path == "/healthz" && resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/healthz = %d while NATS is frozen", resp.StatusCode)
			}
			return nil
		}
		// Alive, at once, throughout: no liveness check waits on NATS. (The writes fill the buffers
		// within the first second.) After that second the endpoints that run the readiness checks are
		// asked, all three at once, while /healthz is still polled: each answers by the checks' 5 s bound.
		paths := []string{"/readyz", "/status", "/metrics"}
		errs := make([]error, len(paths))
		var asked sync.WaitGroup
		answered := make(chan struct{})
		from, launched := time.Now(), false
		for done := false; !done; time.Sleep(50 * time.Millisecond) {
			if err := get("/healthz", 2*time.Second); err != nil {
				t.Fatal(err)
			}
			switch {
			case !launched && time.Since(from) >= time.Second:
				for i, path := range paths {
					asked.Go(func() { errs[i] = get(path, 8*time.Second) })
				}
				go func() { asked.Wait(); close(answered) }()
				launched = true
			case launched && time.Since(from) >= 4*time.Second:
				select {
				case <-answered:
					done = true
				default:
				}
			}
		}
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		px.Thaw()
		h.waitStored("TRACKING_EVENTS", n, 60*time.Second)
		h.assertGenerated(n)
	})

	t.Run("a stop keeps to the shutdown timeout", func(t *testing.T) {
		t.Parallel()
		h, px, stop := frozen(t, 2*time.Second)
		testutil.Eventually(t, 20*time.Second, "the write to the frozen server timed out", func() bool {
			return h.bridge.natsSt.Status() != nats.CONNECTED
		})
		start := time.Now()
		// The report consumer cannot finish its stop against a frozen server: the stop times out, an error.
		if err := stop(); err != nil && !errors.Is(err, ErrShutdownTimeout) {
			t.Fatalf("stop while NATS is frozen: %v", err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("the stop took %v with a shutdown timeout of 2s", d)
		}
		px.Thaw()
		h.startBridge()
		h.waitStored("TRACKING_EVENTS", n, 60*time.Second)
		h.assertGenerated(n)
	})
}

// TestEndToEndKill9: the bridge process is killed with SIGKILL mid-stream, twice, and started again;
// every event is stored exactly once, although the duplicate window is too short to help.
func TestEndToEndKill9(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 20000
	h := newHarness(t, sim.Options{EventRate: -1, EventLimit: n})
	h.cfg.LogLevel = "info"
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(exe)
		cmd.Env = []string{"DAEMON_TEST_AS_BRIDGE=1"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, config.Prefix+"_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		vars, err := h.config().Environ()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, vars...)
		cmd.Stdout, cmd.Stderr = h.logs, h.logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	for _, at := range []int{n / 4, n / 2} {
		cmd := start()
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d events", at), func() bool { return h.storedCount("TRACKING_EVENTS") >= at })
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	cmd := start()
	h.waitStored("TRACKING_EVENTS", n, 60*time.Second)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("bridge exit after SIGTERM: %v", err)
	}
	h.assertGenerated(n)
}

// TestEndToEndUpstreamRefusals: a wrong password, an unreachable token URL and a 403 on the stream each
// give a clear error, are retried at the stated pace, and never print a secret.
//
// The pace is checked both ways a busy machine cannot fake: the retries come (a wait on a condition), and
// they come no faster than the pace allows over the time that has actually passed since the bridge
// started (a busy machine only slows them down). The lease's TTL is one a loaded machine's pauses do not
// run out: a lost term would stop the stream and start it again, and count twice.
func TestEndToEndUpstreamRefusals(t *testing.T) {
	t.Parallel()
	newRefusalHarness := func(t *testing.T, o sim.Options) *harness {
		h := newHarness(t, o)
		h.cfg.LeaseTTL = 10 * time.Second
		return h
	}
	t.Run("wrong password", func(t *testing.T) {
		t.Parallel()
		h := newRefusalHarness(t, sim.Options{EventRate: 5})
		h.cfg.Password = "wrong-" + testPassword
		h.loginRetry = time.Second
		start := time.Now()
		h.startBridge()
		testutil.Eventually(t, 10*time.Second, "a second login", func() bool {
			return h.sim.Stats().TokenRequests["password"] >= 2
		})
		time.Sleep(3500 * time.Millisecond) // a window for logins that should not come, not a wait
		logs := h.logs.String()
		if !strings.Contains(logs, "login rejected") || !strings.Contains(logs, "BRIDGE_PASSWORD") {
			t.Errorf("no clear error in the logs")
		}
		// One login at once, then one a second at most.
		elapsed := time.Since(start)
		if got, most := h.sim.Stats().TokenRequests["password"], 2+int(elapsed/time.Second); got > most {
			t.Errorf("%d logins in %v with a login retry of 1s, want at most %d", got, elapsed.Round(time.Millisecond), most)
		}
		if strings.Contains(logs, testPassword) {
			t.Error("password in the logs")
		}
	})
	t.Run("token URL unreachable", func(t *testing.T) {
		t.Parallel()
		h := newRefusalHarness(t, sim.Options{})
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		dead := ln.Addr().String()
		ln.Close()
		h.cfg.TokenURL = "http://" + dead + "/auth/token"
		h.cfg.ReconnectMin, h.cfg.ReconnectMax = 100*time.Millisecond, 400*time.Millisecond
		start := time.Now()
		h.startBridge()
		testutil.Eventually(t, 10*time.Second, "three attempts after the first failure", func() bool {
			return countLines(h.logs.String(), "stream attempt failed again", "token endpoint unavailable") >= 3
		})
		time.Sleep(3 * time.Second) // a window for attempts that should not come, not a wait
		logs := h.logs.String()
		if c := countLines(logs, `"level":"WARN"`, "token endpoint unavailable"); c != 1 {
			t.Errorf("%d warnings naming the token endpoint, want 1 (one line per state change)", c)
		}
		// Attempts after the first, at a backoff of 100 ms doubling up to 400 ms, each delay drawn from its
		// upper half: no more than one each 50 ms however long it ran. The bound catches a missing backoff.
		elapsed := time.Since(start)
		if c, most := countLines(logs, "stream attempt failed again", "token endpoint unavailable"), int(elapsed/(50*time.Millisecond)); c > most {
			t.Errorf("%d attempts after the first in %v with a 100ms–400ms backoff, want at most %d", c, elapsed.Round(time.Millisecond), most)
		}
		if strings.Contains(logs, testPassword) {
			t.Error("password in the logs")
		}
	})
	t.Run("stream forbidden", func(t *testing.T) {
		t.Parallel()
		h := newRefusalHarness(t, sim.Options{EventRate: 5, Faults: sim.Faults{StreamStatus: 403}})
		h.cfg.UnavailableRetry = 500 * time.Millisecond
		start := time.Now()
		h.startBridge()
		testutil.Eventually(t, 10*time.Second, "a second stream request", func() bool {
			return h.sim.Stats().StreamRequests >= 2
		})
		time.Sleep(2200 * time.Millisecond) // a window for requests that should not come, not a wait
		logs := h.logs.String()
		if !strings.Contains(logs, "not available to this account") {
			t.Errorf("no clear error in the logs")
		}
		// One request at once, then one each 500 ms at most.
		elapsed := time.Since(start)
		if got, most := h.sim.Stats().StreamRequests, 2+int(elapsed/(500*time.Millisecond)); got > most {
			t.Errorf("%d stream requests in %v at a 500ms pace, want at most %d", got, elapsed.Round(time.Millisecond), most)
		}
		if c := countLines(logs, `"level":"WARN"`, "not available to this account"); c > 1 {
			t.Errorf("the same failure logged %d times: want one line per state change", c)
		}
		if strings.Contains(logs, testPassword) {
			t.Error("password in the logs")
		}
		h.sim.SetFaults(sim.Faults{})
		h.waitStored("TRACKING_EVENTS", 3, 10*time.Second)
	})
}

// countLines counts the log lines that contain every one of parts.
func countLines(logs string, parts ...string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// idsUntil waits until a message with Nats-Msg-Id last is in the stream and returns every message's
// Nats-Msg-Id, in stream order.
func (h *harness) idsUntil(stream, last string) []string {
	h.t.Helper()
	var ids []string
	testutil.Eventually(h.t, 20*time.Second, last+" stored", func() bool {
		ids = ids[:0]
		for _, m := range h.stored(stream) {
			ids = append(ids, m.Headers().Get("Nats-Msg-Id"))
		}
		return slices.Contains(ids, last)
	})
	return ids
}
