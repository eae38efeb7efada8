package consume

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// env is an embedded nats-server with the bridge's streams, the simulator behind an httptest server (its
// report calls recorded), and a report client logged in as the simulator's default user.
type env struct {
	tb     testing.TB
	ns     *testutil.NATS
	nc     *nats.Conn
	js     jetstream.JetStream
	layout layout.Streams
	sim    *sim.Server
	http   *httptest.Server
	rec    *recorder
	client *upstream.ReportClient
	hc     *http.Client
	tokens *upstream.TokenSource
	logs   *testutil.Logs
}

// newEnv starts everything. With record, every report call is recorded (the benchmark leaves it off).
func newEnv(tb testing.TB, record bool) *env {
	tb.Helper()
	return newEnvWith(tb, record, nil)
}

// newEnvWith is newEnv with the server's options adjusted by configure.
func newEnvWith(tb testing.TB, record bool, configure func(*server.Options)) *env {
	tb.Helper()
	e := &env{tb: tb, layout: layout.Streams{Prefix: "tracking"}, rec: &recorder{}, logs: &testutil.Logs{},
		ns: testutil.StartNATS(tb, configure)}
	e.nc = e.ns.Connect()
	e.js, _ = jetstream.New(e.nc)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	if err := e.layout.Ensure(ctx, e.js, true, slog.New(slog.DiscardHandler)); err != nil {
		tb.Fatal(err)
	}

	e.sim = sim.New(sim.Options{})
	var h http.Handler = e.sim.Handler()
	if record {
		h = e.rec.wrap(h)
	}
	e.http = httptest.NewServer(h)
	tb.Cleanup(e.http.Close)
	hc, err := upstream.NewHTTPClient(upstream.ClientOptions{Timeout: 10 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(hc.CloseIdleConnections)
	e.hc = hc
	e.tokens = upstream.NewTokenSource(upstream.TokenConfig{
		TokenURL: e.http.URL + sim.TokenPath, ClientID: sim.DefaultClientID, Username: "demo",
		Password: func() string { return "demo" }, Client: hc,
	})
	e.client = upstream.NewReportClient(upstream.ReportConfig{URL: e.reportURL(), Tokens: e.tokens, Client: hc})
	return e
}

func (e *env) reportURL() string { return e.http.URL + sim.DefaultBasePath + "/tracking/events" }

// config is the consumer configuration of the tests: short backoffs.
func (e *env) config() Config {
	return Config{
		Stream:      e.layout.Reports(),
		Durable:     "bridge-reports",
		Subject:     e.layout.ReportsSubject(),
		DLQSubject:  e.layout.ReportsDLQSubject(),
		DLQStream:   e.layout.DLQ(),
		Concurrency: 16,
		BackoffMin:  20 * time.Millisecond,
		BackoffMax:  200 * time.Millisecond,
		AckWait:     30 * time.Second,
		Logger:      slog.New(e.logs),
	}
}

// running is a Consumer whose Run runs in the background.
type running struct {
	*Consumer
	cancel context.CancelFunc
	done   chan error
}

// start runs a consumer on js with cfg; it is stopped at the end of the test if still running.
func (e *env) start(js jetstream.JetStream, cfg Config) *running {
	e.tb.Helper()
	c := New(js, e.client, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Consumer: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	e.tb.Cleanup(func() { cancel(); <-r.done; r.done <- nil })
	testutil.Eventually(e.tb, 10*time.Second, "consumer ready", func() bool { return c.Ready() == nil })
	return r
}

// stop stops the consumer and returns Run's result.
func (r *running) stop(tb testing.TB) error {
	tb.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		tb.Fatal("Run did not return within 30s of its context ending")
		return nil
	}
}

// publish stores a report in the reports stream, with the given headers (key, value, ...).
func (e *env) publish(body string, hdr ...string) {
	e.tb.Helper()
	m := nats.NewMsg(e.layout.ReportsSubject())
	m.Data = []byte(body)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	if _, err := e.js.PublishMsg(ctx, m); err != nil {
		e.tb.Fatal(err)
	}
}

// publishN stores n distinct valid reports (key "r-<i>") with asynchronous publishes.
func (e *env) publishN(n int) {
	e.tb.Helper()
	for i := range n {
		m := nats.NewMsg(e.layout.ReportsSubject())
		m.Data = report(i)
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("r-%d", i))
		if _, err := e.js.PublishMsgAsync(m); err != nil {
			e.tb.Fatal(err)
		}
		if i%1000 == 999 || i == n-1 { // stay well below the client's limit of pending publishes
			select {
			case <-e.js.PublishAsyncComplete():
			case <-time.After(60 * time.Second):
				e.tb.Fatal("publishes not acknowledged within 60s")
			}
		}
	}
}

// demoOrders are the order positions the simulator tracks for user demo: the only ones demo may report
// events for (another user's are answered 403, unknown ones 404).
var demoOrders = sim.New(sim.Options{}).TrackedOrders("demo")

// report returns a valid report about one of demo's tracked order positions, distinct for each i.
func report(i int) []byte {
	o := demoOrders[i%len(demoOrders)]
	return fmt.Appendf(nil, `{"order":{"orderId":%q,"positionId":%q},"transport":{"identifier":"truck-7"},`+
		`"event":{"timestamp":"2024-05-01T12:%02d:%02dZ","type":"GATE_IN","observation":{"observedMeansOfTransport":`+
		`{"modeOfTransport":"TRUCK","truck":{"countryCode":"DE","licensePlate":"HH-TB %d"}},"observedLoadingUnit":`+
		`{"loadingUnit":{"containerClass":"CONTAINER","number":"MSCU1234565"},"loadingState":"FULL",`+
		`"seals":[{"type":"CUSTOMS","number":"S-%d"}]}}},"reporter":{"id":"op-1","name":"Test Operator"}}`,
		o.OrderID, o.PositionID, i/60%60, i%60, i, i)
}

// streamMsgs returns the number of messages stored in a stream.
func (e *env) streamMsgs(name string) uint64 {
	e.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, name)
	if err != nil {
		e.tb.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.tb.Fatal(err)
	}
	return info.State.Msgs
}

// deadLetters returns every message of the dead-letter stream, in order.
func (e *env) deadLetters() []*jetstream.RawStreamMsg {
	e.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	s, err := e.js.Stream(ctx, e.layout.DLQ())
	if err != nil {
		e.tb.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.tb.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			e.tb.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// accepted returns the reports the simulator accepted for the default user.
func (e *env) accepted() []sim.AcceptedReport { return e.sim.Reports("demo") }

// recorder records the report calls reaching the upstream.
type recorder struct {
	mu    sync.Mutex
	calls []reportCall
}

type reportCall struct {
	at                     time.Time
	auth, key, contentType string
	body                   []byte
	status                 int
}

func (r *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/tracking/events") {
			h.ServeHTTP(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		c := reportCall{at: time.Now(), auth: req.Header.Get("Authorization"), key: req.Header.Get("Idempotency-Key"),
			contentType: req.Header.Get("Content-Type"), body: body}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, req)
		c.status = sw.status
		r.mu.Lock()
		r.calls = append(r.calls, c)
		r.mu.Unlock()
	})
}

func (r *recorder) all() []reportCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]reportCall(nil), r.calls...)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
