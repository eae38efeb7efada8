package service_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// scriptedUpstream answers /orders/<id> by the id's first word, each answer quoting the request's path
// as an upstream's message may: missing (404 with messages), broken (500, HTML), html (200, not JSON),
// odd (304), slow (no answer until the caller gives up), huge (200 with a body beyond max_payload), cut
// (200 whose body ends early) and hangup (the connection closed before any answer).
func scriptedUpstream(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/orders/")
		word, _, _ := strings.Cut(id, "-")
		switch word {
		case "missing":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"messages":["no order %s"]}`, id)
		case "broken":
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "<html>%s</html>", id)
		case "html":
			fmt.Fprintf(w, "<html>%s</html>", id)
		case "odd":
			w.WriteHeader(http.StatusNotModified)
		case "slow":
			<-r.Context().Done()
		case "huge":
			fmt.Fprintf(w, `{"id":%q,"pad":%q}`, id, strings.Repeat(id, (100<<10)/len(id)))
		case "cut":
			w.Header().Set("Content-Length", "1000")
			fmt.Fprintf(w, `{"id":%q`, id)
		case "hangup":
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		default:
			t.Errorf("unscripted request %s", r.URL)
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestDiscoveryShowsNoCallerBytes: whatever a caller sends, discovery (PING, INFO, STATS, which anyone
// allowed discovery reads) shows none of it. For every kind of failure the service answers, a request
// carries a unique marker where the failure's description would quote it (the value refused, the order
// id in the upstream's message or in net/http's error); the caller's own reply may quote it, and STATS
// then shows the endpoint's last error as the failure's code and kind alone.
func TestDiscoveryShowsNoCallerBytes(t *testing.T) {
	t.Parallel()
	// Concurrency 1, so that a request held upstream makes the next one busy; a small max_payload, so
	// that an answer beyond it is cheap.
	h := start(t, options{upstreamURL: scriptedUpstream(t), concurrency: 1,
		nats: func(o *server.Options) { o.MaxPayload = 64 << 10 }})
	tok := start(t, options{})     // against the simulator, whose token endpoint fails on demand
	u := newUnitsStore(t, h, true) // the units view on h; tok has none
	// The units endpoints' reads go to a JetStream API nobody answers.
	lost := start(t, options{jsPrefix: "NOBODY.API"})

	var n atomic.Int32
	marker := func() string { return fmt.Sprintf("zMARK%03dq", n.Add(1)) }
	type row struct {
		name string
		h    *harness
		op   string
		// body and hdr build the request around its marker m.
		body  func(m string) string
		hdr   func(m string) nats.Header
		setup func(t *testing.T) (cleanup func()) // before the request
		code  int
		last  string // the endpoint's last_error
	}
	rows := []row{
		{name: "body over its bound", h: h, op: "orders.get",
			body: func(m string) string { return `{"id":"` + strings.Repeat(m, 2000) + `"}` },
			code: 400, last: "400:the request body is larger than its limit"},
		{name: "control character in a value", h: h, op: "orders.get",
			body: func(m string) string { return `{"id":"` + m + `\u0001"}` },
			code: 400, last: "400:the request is invalid"},
		{name: "value too long", h: h, op: "orders.delete",
			body: func(m string) string { return `{"id":"` + strings.Repeat(m, 20) + `"}` },
			code: 400, last: "400:the request is invalid"},
		{name: "unknown member", h: h, op: "orders.get",
			body: func(m string) string { return `{"id":"x","` + m + `":1}` },
			code: 400, last: "400:the request is invalid"},
		{name: "not JSON", h: h, op: "locations.search",
			body: func(m string) string { return `{"name":` + m + `}` },
			code: 400, last: "400:the request is invalid"},
		{name: "integer out of range", h: h, op: "locations.search",
			body: func(m string) string { return `{"page":1e99,"name":"` + m + `"}` },
			code: 400, last: "400:the request is invalid"},
		{name: "invalid booking order", h: h, op: "orders.create",
			body: func(m string) string { return `{"terminalId":"` + m + `","action":"` + m + `"}` },
			code: 400, last: "400:the request is invalid"},
		{name: "Bridge-Timeout header", h: h, op: "orders.list",
			hdr:  func(m string) nats.Header { return nats.Header{service.TimeoutHeader: {m}} },
			code: 400, last: "400:the request is invalid"},
		{name: "Idempotency-Key header", h: h, op: "tracking.report",
			body: func(string) string { return `{}` },
			hdr:  func(m string) nats.Header { return nats.Header{service.IdempotencyKeyHeader: {m + "\x01"}} },
			code: 400, last: "400:the request is invalid"},
		{name: "busy", h: h, op: "orders.delete",
			body: func(m string) string { return `{"id":"` + m + `"}` },
			setup: func(t *testing.T) func() {
				done := make(chan reply, 1)
				before := h.calls.n.Load()
				go func() {
					done <- h.request("orders.get", `{"id":"slow-held"}`, service.TimeoutHeader, "3s")
				}()
				testutil.Eventually(t, 5*time.Second, "a call held upstream", func() bool { return h.calls.n.Load() > before })
				return func() { <-done }
			},
			code: 503, last: "503:the bridge is busy"},
		{name: "upstream's message quotes the id", h: h, op: "orders.delete",
			body: func(m string) string { return `{"id":"missing-` + m + `"}` },
			code: 404, last: "404:the upstream answered HTTP 404"},
		{name: "upstream's HTML quotes the id", h: h, op: "orders.get",
			body: func(m string) string { return `{"id":"broken-` + m + `"}` },
			code: 500, last: "500:the upstream answered HTTP 500"},
		{name: "upstream's answer not JSON", h: h, op: "orders.get",
			body: func(m string) string { return `{"id":"html-` + m + `"}` },
			code: 502, last: "502:the upstream's answer is not JSON (upstream HTTP 200)"},
		{name: "unexpected status", h: h, op: "orders.get",
			body: func(m string) string { return `{"id":"odd-` + m + `"}` },
			code: 502, last: "502:the upstream answered with an unexpected status (upstream HTTP 304)"},
		{name: "timeout", h: h, op: "orders.get",
			body: func(m string) string { return `{"id":"slow-` + m + `"}` },
			hdr:  func(string) nats.Header { return nats.Header{service.TimeoutHeader: {"100ms"}} },
			code: 504, last: "504:the upstream did not answer in time"},
		{name: "answer beyond max_payload", h: h, op: "orders.get",
			body: func(m string) string { return `{"id":"huge-` + m + `"}` },
			code: 502, last: "502:the reply is larger than the NATS server's max_payload (upstream HTTP 200)"},
		{name: "answer cut short", h: h, op: "orders.get",
			body: func(m string) string { return `{"id":"cut-` + m + `"}` },
			code: 502, last: "502:the upstream's answer is too large or cut short (upstream HTTP 200)"},
		{name: "unreachable, net/http's error quotes the URL", h: h, op: "orders.delete",
			body: func(m string) string { return `{"id":"hangup-` + m + `"}` },
			code: 503, last: "503:the upstream cannot be reached"},
		{name: "no token", h: tok, op: "orders.get",
			body: func(m string) string { return `{"id":"` + m + `"}` },
			setup: func(*testing.T) func() {
				tok.up.Sim().SetFaults(sim.Faults{TokenErrorRate: 1})
				return func() { tok.up.Sim().SetFaults(sim.Faults{}) }
			},
			code: 503, last: "503:the bridge has no access token"},
		{name: "no token in time", h: tok, op: "orders.get",
			body: func(m string) string { return `{"id":"` + m + `"}` },
			hdr:  func(string) nats.Header { return nats.Header{service.TimeoutHeader: {"100ms"}} },
			setup: func(*testing.T) func() {
				tok.up.Sim().SetFaults(sim.Faults{Latency: time.Second})
				return func() { tok.up.Sim().SetFaults(sim.Faults{}) }
			},
			code: 504, last: "504:no access token in time"},
	}
	rows = append(rows,
		row{name: "no event of the unit", h: h, op: "units.get",
			body: func(m string) string { return `{"unit":"` + m + `"}` },
			code: 404, last: "404:the units view has no event of the unit"},
		row{name: "no units view", h: tok, op: "units.get",
			body: func(m string) string { return `{"unit":"` + m + `"}` },
			code: 503, last: "503:the units view or the events stream does not exist"},
		row{name: "the view's value not JSON", h: h, op: "units.get",
			body: func(m string) string {
				u.put(layout.UnitToken(m), "e-"+m, "not JSON "+m)
				return `{"unit":"` + m + `"}`
			},
			code: 502, last: "502:the units view holds a value that is not JSON"},
		row{name: "NATS not in time", h: h, op: "units.events",
			body: func(m string) string { return `{"unit":"` + m + `"}` },
			hdr:  func(string) nats.Header { return nats.Header{service.TimeoutHeader: {"1ns"}} },
			code: 504, last: "504:NATS did not answer in time"},
		row{name: "NATS read failed", h: lost, op: "units.events",
			body: func(m string) string { return `{"unit":"` + m + `"}` },
			code: 503, last: "503:reading from NATS failed"},
	)
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			m := marker()
			if tc.setup != nil {
				defer tc.setup(t)()
			}
			msg := nats.NewMsg("tracking.api." + tc.op)
			if tc.body != nil {
				msg.Data = []byte(tc.body(m))
			}
			if tc.hdr != nil {
				msg.Header = tc.hdr(m)
			}
			resp, err := tc.h.nc.RequestMsg(msg, 10*time.Second)
			// A row before may leave its upstream call in flight (a caller that gave up waiting): with
			// concurrency 1 the service is busy until it ends. Ask again then, for a while.
			for deadline := time.Now().Add(30 * time.Second); err == nil && tc.name != "busy" &&
				strings.HasPrefix(resp.Header.Get(micro.ErrorHeader), "the bridge is busy") && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond) // the call in flight ends by itself; nothing to wait on here
				resp, err = tc.h.nc.RequestMsg(msg, 10*time.Second)
			}
			if err != nil {
				t.Fatal(err)
			}
			if code := resp.Header.Get(micro.ErrorCodeHeader); code != fmt.Sprint(tc.code) {
				t.Fatalf("code %s %q, want %d", code, resp.Header.Get(micro.ErrorHeader), tc.code)
			}
			t.Logf("the caller's reply: %s", resp.Header.Get(micro.ErrorHeader))
			for _, v := range []micro.Verb{micro.PingVerb, micro.InfoVerb, micro.StatsVerb} {
				if answer := tc.h.control(v); strings.Contains(string(answer), m) {
					t.Errorf("%s shows the caller's %s: %s", v, m, answer)
				}
			}
			if got := lastError(t, tc.h, tc.op); got != tc.last {
				t.Errorf("last_error %q, want %q", got, tc.last)
			}
		})
	}
	// Every kind a request can bring has its row, but for those only a stop brings, when discovery no
	// longer answers (TestLastErrorIsTheKind covers every kind).
	for _, k := range service.FailureKinds {
		if k == "the bridge is stopping" || k == "the bridge is shutting down" {
			continue
		}
		if !slices.ContainsFunc(rows, func(r row) bool { return strings.Contains(r.last, ":"+k) }) {
			t.Errorf("no row for the kind %q", k)
		}
	}
}

// lastError returns the last_error of the endpoint of operation op in the STATS answer.
func lastError(t *testing.T, h *harness, op string) string {
	t.Helper()
	var stats micro.Stats
	if err := json.Unmarshal(h.control(micro.StatsVerb), &stats); err != nil {
		t.Fatal(err)
	}
	for _, e := range stats.Endpoints {
		if e.Name == strings.ReplaceAll(op, ".", "-") {
			var data service.EndpointStats
			if err := json.Unmarshal(e.Data, &data); err != nil {
				t.Fatal(err)
			}
			if data.LastError != e.LastError {
				t.Errorf("last_error %q in the data, %q in micro's stats", data.LastError, e.LastError)
			}
			return e.LastError
		}
	}
	t.Fatalf("no stats for %s", op)
	return ""
}

// TestInstanceIDNotAnInboxName: the instance id that PING, INFO and STATS show shares no prefix with
// the inbox names nats.go draws for the connections of the process, the bridge's among them.
func TestInstanceIDNotAnInboxName(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	var p micro.Ping
	if err := json.Unmarshal(h.control(micro.PingVerb), &p); err != nil {
		t.Fatal(err)
	}
	inbox := strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
	if len(p.ID) != len(inbox) || p.ID[:12] == inbox[:12] {
		t.Errorf("instance id %s, an inbox of the process %s: the same prefix", p.ID, inbox)
	}
}
