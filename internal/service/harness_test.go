package service_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// harness is the service against a real nats-server and the simulator, with a caller's connection.
type harness struct {
	t      *testing.T
	ns     *testutil.NATS
	up     *simtest.Upstream
	tokens *upstream.TokenSource
	calls  *countingCaller
	obs    *recorder
	svc    *service.Service
	logs   *testutil.Logs // the service's
	nc     *nats.Conn     // the caller's
	reads  *nats.Conn     // the units endpoints' reads', with options.readsConn
	stop   func()         // stops the service and waits for Run
}

type options struct {
	sim         sim.Options
	nats        func(*server.Options)
	concurrency int
	timeout     time.Duration
	upstreamURL string                // instead of the simulator's
	svc         func(*service.Config) // adjusts the service's configuration
	inbox       string                // the service connection's inbox prefix, when not nats.go's
	jsPrefix    string                // the JetStream API prefix of the units endpoints' reads, when not $JS.API
	readsConn   bool                  // the units endpoints read through a connection of their own, harness.reads
}

// countingCaller counts the upstream calls the service makes.
type countingCaller struct {
	next service.Caller
	n    atomic.Int64
}

func (c *countingCaller) Call(ctx context.Context, r upstream.APIRequest) (*upstream.APIResponse, error) {
	c.n.Add(1)
	return c.next.Call(ctx, r)
}

// recorder is a service.Observer keeping the codes per endpoint and the drops per reason.
type recorder struct {
	mu      sync.Mutex
	codes   map[string][]int
	refused map[string]int
}

func (r *recorder) APIRefused(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused == nil {
		r.refused = map[string]int{}
	}
	r.refused[reason]++
}

func (r *recorder) refusals(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused[reason]
}

func (r *recorder) APIServed(endpoint string, code int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.codes == nil {
		r.codes = map[string][]int{}
	}
	r.codes[endpoint] = append(r.codes[endpoint], code)
}

func (r *recorder) last(endpoint string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.codes[endpoint]
	if len(c) == 0 {
		return 0
	}
	return c[len(c)-1]
}

func newTokens(baseURL, user, password string) *upstream.TokenSource {
	return upstream.NewTokenSource(upstream.TokenConfig{
		TokenURL: baseURL + sim.TokenPath, ClientID: sim.DefaultClientID, Username: user,
		Password: func() string { return password }, LoginRetry: time.Minute,
	})
}

func start(t *testing.T, o options) *harness {
	t.Helper()
	if o.sim.Users == nil {
		o.sim.Users = map[string]string{"demo": "demo", "other": "other"}
	}
	h := &harness{t: t, ns: testutil.StartNATS(t, o.nats), up: simtest.Start(t, false, o.sim), obs: &recorder{},
		logs: &testutil.Logs{}}
	h.tokens = newTokens(h.up.Srv.URL, "demo", "demo")
	base := h.up.Srv.URL + sim.DefaultBasePath
	if o.upstreamURL != "" {
		base = o.upstreamURL
	}
	client, err := upstream.NewHTTPClient(upstream.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.calls = &countingCaller{next: upstream.NewAPIClient(upstream.APIConfig{BaseURL: base, Tokens: h.tokens, Client: client})}
	validator := service.NewOpenAPIValidator(256 << 10)
	bridgeNC := h.ns.Connect()
	if o.inbox != "" {
		var err error
		if bridgeNC, err = nats.Connect(h.ns.URL(), nats.CustomInboxPrefix(o.inbox)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(bridgeNC.Close)
	}
	cfg := service.Config{
		Prefix: "tracking", Concurrency: o.concurrency, Timeout: o.timeout, Version: "dev",
		Validator: validator, Observer: h.obs, Logger: slog.New(h.logs),
	}
	if o.jsPrefix != "" {
		js, err := jetstream.NewWithAPIPrefix(bridgeNC, o.jsPrefix)
		if err != nil {
			t.Fatal(err)
		}
		cfg.JetStream = js
	}
	if o.readsConn {
		h.reads = h.ns.Connect()
		js, err := jetstream.New(h.reads)
		if err != nil {
			t.Fatal(err)
		}
		cfg.JetStream = js
	}
	if o.svc != nil {
		o.svc(&cfg)
	}
	h.svc = service.New(bridgeNC, h.calls, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.svc.Run(ctx) }()
	h.stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	})
	t.Cleanup(h.stop)
	testutil.Eventually(t, 5*time.Second, "service up", func() bool { return h.svc.Ready() == nil })
	// Ready follows the subscriptions as the client made them; a flush waits until the server has them
	// too, so that the first request finds a responder.
	if err := bridgeNC.Flush(); err != nil {
		t.Fatal(err)
	}
	h.nc = h.ns.Connect()
	return h
}

// reply is a service answer.
type reply struct {
	msg  *nats.Msg
	code int    // Nats-Service-Error-Code, 0 on success
	desc string // Nats-Service-Error
}

func (r reply) messages(t *testing.T) []string {
	t.Helper()
	var m struct {
		Messages []string `json:"messages"`
	}
	if err := json.Unmarshal(r.msg.Data, &m); err != nil || m.Messages == nil {
		t.Fatalf("failure body is not an ApiResponseMessage: %q", r.msg.Data)
	}
	return m.Messages
}

// request sends body to P.api.<op> and waits for the reply.
func (h *harness) request(op string, body string, hdr ...string) reply {
	h.t.Helper()
	m := nats.NewMsg("tracking.api." + op)
	m.Data = []byte(body)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		h.t.Fatalf("%s: %v", op, err)
	}
	r := reply{msg: resp, desc: resp.Header.Get(micro.ErrorHeader)}
	if c := resp.Header.Get(micro.ErrorCodeHeader); c != "" {
		r.code, err = strconv.Atoi(c)
		if err != nil {
			h.t.Fatalf("%s: error code %q", op, c)
		}
	}
	return r
}

// ok sends a request that must succeed and returns the body.
func (h *harness) ok(op, body string, hdr ...string) []byte {
	h.t.Helper()
	r := h.request(op, body, hdr...)
	if r.code != 0 {
		h.t.Fatalf("%s %s: %d %s", op, body, r.code, r.desc)
	}
	return r.msg.Data
}

// direct makes the same call over HTTP as user, returning status and body.
func (h *harness) direct(ts *upstream.TokenSource, method, path string, body []byte) (int, []byte) {
	h.t.Helper()
	c := upstream.NewAPIClient(upstream.APIConfig{BaseURL: h.up.Srv.URL + sim.DefaultBasePath, Tokens: ts})
	resp, err := c.Call(context.Background(), upstream.APIRequest{Method: method, Path: path, Body: body, MaxBody: 1 << 20})
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Status, resp.Body
}

// terminal returns the id of an ADMINISTRATIVE_TERMINAL, found through the service.
func (h *harness) terminal() string {
	h.t.Helper()
	var page struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(h.ok("locations.search", `{"type":"ADMINISTRATIVE_TERMINAL","pageSize":1}`), &page); err != nil || len(page.Data) != 1 {
		h.t.Fatalf("no terminal: %v", err)
	}
	return page.Data[0].ID
}

// order is a valid BookingOrder body.
func order(terminal, reference string) string {
	return `{"terminalId":"` + terminal + `","action":"PICK_UP","reference":"` + reference +
		`","unit":{"loadingState":"FULL","isoCode":"22G1"}}`
}

// create creates an order through the service and returns its id.
func (h *harness) create(reference string) string {
	h.t.Helper()
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(h.ok("orders.create", order(h.terminal(), reference)), &created); err != nil || created.ID == "" {
		h.t.Fatalf("create: %v", err)
	}
	return created.ID
}
