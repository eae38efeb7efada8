package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
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

// TestEndpointsSucceed calls every endpoint through NATS against the simulator and checks that the reply
// is the upstream's body verbatim (compared with the same call made directly over HTTP where the answer
// does not change between calls).
func TestEndpointsSucceed(t *testing.T) {
	t.Parallel()
	h := start(t, options{})

	// searchLocations, verbatim.
	search := h.ok("locations.search", `{"type":"SEAPORT","name":"ha","page":1,"pageSize":5}`)
	if st, want := h.direct(h.tokens, http.MethodGet, "/locations?name=ha&page=1&pageSize=5&type=SEAPORT", nil); st != 200 || !bytes.Equal(search, want) {
		t.Errorf("locations.search reply differs from the direct call (%d):\n%s\n%s", st, search, want)
	}
	if all := h.ok("locations.search", ``); !bytes.Contains(all, []byte(`"pagination"`)) {
		t.Errorf("locations.search with an empty body: %s", all)
	}

	// createOrder, listOpenOrders, getOrder.
	id := h.create("REF-1")
	if list := h.ok("orders.list", `{}`); !bytes.Contains(list, []byte(`"`+id+`"`)) {
		t.Errorf("orders.list %s lacks %s", list, id)
	}
	got := h.ok("orders.get", `{"id":"`+id+`"}`)
	if st, want := h.direct(h.tokens, http.MethodGet, "/orders/"+id, nil); st != 200 || !bytes.Equal(got, want) {
		t.Errorf("orders.get reply differs from the direct call:\n%s\n%s", got, want)
	}

	// updateOrder: the order member goes upstream verbatim.
	upd := h.request("orders.update", `{"id":"`+id+`","order":`+order(h.terminal(), "REF-2")+`}`)
	if upd.code != 0 {
		t.Fatalf("orders.update: %d %s", upd.code, upd.desc)
	}
	if got := h.ok("orders.get", `{"id":"`+id+`"}`); !bytes.Contains(got, []byte(`"REF-2"`)) {
		t.Errorf("the update did not arrive: %s", got)
	}

	// queryTracking, by either pair.
	tracked := h.up.Sim().TrackedOrders("demo")[0]
	q := h.ok("tracking.query", fmt.Sprintf(`{"orderId":%q,"positionId":%q}`, tracked.OrderID, tracked.PositionID))
	if !bytes.Contains(q, []byte(`"observedUntil"`)) {
		t.Errorf("tracking.query: %s", q)
	}
	q = h.ok("tracking.query", fmt.Sprintf(`{"clientOrderReference":%q,"clientPositionReference":%q}`,
		tracked.ClientOrderReference, tracked.ClientPositionReference))
	if !bytes.Contains(q, []byte(tracked.OrderID)) {
		t.Errorf("tracking.query by client references: %s", q)
	}

	// reportTrackingEvent, with the caller's Idempotency-Key.
	report := fmt.Sprintf(`{"order":{"orderId":%q,"positionId":%q},"event":{"timestamp":"2026-01-02T03:04:05Z","type":"GATE_IN"}}`,
		tracked.OrderID, tracked.PositionID)
	rep := h.request("tracking.report", report, "Idempotency-Key", "k-1")
	if rep.code != 0 || len(rep.msg.Header) != 0 {
		t.Fatalf("tracking.report: %d %s", rep.code, rep.desc)
	}
	if rs := h.up.Sim().Reports("demo"); len(rs) != 1 || rs[0].IdempotencyKey != "k-1" || string(rs[0].Body) != report {
		t.Errorf("reports upstream: %+v", rs)
	}

	// deleteOrder.
	h.ok("orders.delete", `{"id":"`+id+`"}`)
	if list := h.ok("orders.list", ``); bytes.Contains(list, []byte(id)) {
		t.Errorf("deleted order still listed: %s", list)
	}

	// The units endpoints, answered from NATS.
	u := newUnitsStore(t, h, true)
	u.put("MSKU1234567", "e-1", u.store(layout.EventSubject("tracking", "LOAD", "MSKU1234567"), event("e-1", "LOAD", "MSKU1234567", 1, 0)))
	h.ok("units.get", `{"unit":"MSKU1234567"}`)
	h.ok("units.events", `{"unit":"MSKU1234567"}`)

	for _, op := range service.Operations {
		if h.obs.last(op.Name) != op.Success {
			t.Errorf("%s: last code observed %d, want %d", op.Name, h.obs.last(op.Name), op.Success)
		}
	}
}

// TestRefusedBeforeCalling: a request the service refuses is answered 400 with every problem, and the
// upstream is not called.
func TestRefusedBeforeCalling(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	for _, tc := range []struct {
		op, body string
		hdr      []string
		want     []string // substrings of the messages, one per problem
	}{
		{"orders.get", `{not json`, nil, []string{"not valid JSON"}},
		{"orders.get", `[1,2]`, nil, []string{"must be a JSON object, not an array"}},
		{"orders.get", ``, nil, []string{"empty"}},
		{"orders.get", `{}`, nil, []string{"id is missing"}},
		{"orders.delete", `{"id":""}`, nil, []string{"id must not be empty"}},
		{"orders.delete", `{"id":".."}`, nil, []string{`id must not be ".."`}},
		{"orders.update", `{"id":5,"order":[],"color":"red"}`, nil,
			[]string{`unknown member "color"`, "id must be a string, not a number", "order must be an object, not an array"}},
		{"orders.update", `{"id":"BO-1","order":{"action":"PICK_UP","unit":{}}}`, nil,
			[]string{"order: terminalId is missing", "order: reference is missing", "order: unit.loadingState is missing"}},
		{"orders.list", `{"all":true}`, nil, []string{`unknown member "all"`}},
		{"locations.search", `{"page":0,"pageSize":"ten","type":7}`, nil,
			[]string{"type must be a string", "page must be at least 1", "pageSize must be an integer"}},
		{"locations.search", `{"page":1.5}`, nil, []string{"page must be an integer"}},
		{"tracking.query", `{}`, nil, []string{"either orderId and positionId or"}},
		{"tracking.query", `{"orderId":"O","clientPositionReference":"C"}`, nil,
			[]string{"orderId and positionId must be given together", "clientOrderReference and clientPositionReference must be given together"}},
		{"orders.create", `{"terminalId":1}`, nil,
			[]string{"terminalId must be a string", "action is missing", "reference is missing", "unit is missing"}},
		{"orders.create", `"order"`, nil, []string{"must be a JSON object, not a string"}},
		{"tracking.report", `{"event":{"type":"GATE_IN"}}`, nil, []string{"event.timestamp"}},
		{"orders.list", ``, []string{service.TimeoutHeader, "soon"}, []string{"Bridge-Timeout header"}},
		{"orders.list", ``, []string{service.TimeoutHeader, "-1s"}, []string{"must be positive"}},
		{"orders.get", `{"id":"` + strings.Repeat("9", 129) + `"}`, nil, []string{"id is 129 bytes long, more than the limit of 128"}},
		{"orders.delete", `{"id":"BO\u00001"}`, nil, []string{`id must not contain control characters: "BO\x001"`}},
		{"orders.update", `{"id":"` + strings.Repeat("é", 100) + `","order":` + order("T", "R") + `}`, nil, []string{"id is 200 bytes long"}},
		{"tracking.query", `{"orderId":"` + strings.Repeat("o", 1000) + `","positionId":"1"}`, nil,
			[]string{"orderId is 1000 bytes long", "orderId and positionId must be given together"}},
		{"locations.search", `{"name":"` + strings.Repeat("n", 129) + `"}`, nil, []string{"name is 129 bytes long"}},
		// Ids readers may read in different ways never go upstream: not UTF-8 (an overlong "/", a lone
		// continuation byte), an unpaired surrogate escape, a member given twice at any depth.
		{"orders.get", "{\"id\":\"BO-\xc0\xaf1\"}", nil, []string{"the request is not valid UTF-8"}},
		{"orders.delete", "{\"id\":\"BO-\x801\"}", nil, []string{"the request is not valid UTF-8"}},
		{"orders.get", `{"id":"BO-\ud8001"}`, nil, []string{`the request is not valid UTF-8: the escape \ud800 in id is half of a UTF-16 surrogate pair`}},
		{"tracking.query", `{"orderId":"O","positionId":"\udfff"}`, nil, []string{`the escape \udfff in positionId is half`}},
		{"locations.search", "{\"name\":\"Hamburg\xed\xa0\x80\"}", nil, []string{"the request is not valid UTF-8"}}, // an encoded surrogate
		{"orders.get", `{"id":"BO-1","id":"BO-2"}`, nil, []string{`the request gives the key "id" twice; a key may appear only once`}},
		{"orders.delete", `{"id":"BO-1","\u0069d":"BO-2"}`, nil, []string{`gives the key "id" twice`}},
		{"orders.update", `{"id":"BO-1","order":{"terminalId":"T","reference":"R","reference":"S"}}`, nil,
			[]string{`the request gives the key "reference" twice in order`}},
		{"orders.create", `{"terminalId":"T1","terminalId":"T2"}`, nil, []string{`the booking order gives the key "terminalId" twice`}},
		{"orders.get", `{"id":"BO-1","ID":"BO-2"}`, nil, []string{`the request gives the keys "id" and "ID", which differ only in case`}},
		{"tracking.query", `{"orderId":"O","positionId":"1","po\u017fitionId":"2"}`, nil, // a long s, which folds to s
			[]string{`the request gives the keys "positionId" and "poſitionId", which differ only in case`}},
		{"tracking.report", `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN","type":"GATE_OUT"}}`, nil,
			[]string{`the report gives the key "type" twice in event`}},
		{"tracking.report", "{\"event\":{\"timestamp\":\"2024-05-01T12:30:00Z\",\"type\":\"GATE_IN\",\"id\":\"\xff\"}}", nil,
			[]string{"the report is not valid UTF-8"}},
	} {
		t.Run(tc.op+" "+tc.body, func(t *testing.T) {
			r := h.request(tc.op, tc.body, tc.hdr...)
			if r.code != 400 {
				t.Fatalf("code %d (%s), want 400", r.code, r.desc)
			}
			msgs := r.messages(t)
			if len(msgs) != len(tc.want) {
				t.Errorf("messages %q, want %d", msgs, len(tc.want))
			}
			for _, w := range tc.want {
				if !strings.Contains(strings.Join(msgs, "\n"), w) || !strings.Contains(r.desc, w) {
					t.Errorf("%q not in messages %q or description %q", w, msgs, r.desc)
				}
			}
			if h.obs.last(tc.op) != 400 {
				t.Errorf("observed %d", h.obs.last(tc.op))
			}
		})
	}
	if n := h.calls.n.Load(); n != 0 {
		t.Errorf("the upstream was called %d times for refused requests", n)
	}
}

// TestUpstreamErrors: the upstream's failures pass through with their status and messages.
func TestUpstreamErrors(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	id := h.create("MINE")

	// 401: the token expired upstream; a new one and one repeat, invisible to the caller.
	before := h.up.Sim().Stats()
	h.up.Sim().ExpireTokens()
	h.ok("orders.get", `{"id":"`+id+`"}`)
	after := h.up.Sim().Stats()
	if after.Unauthorized != before.Unauthorized+1 || after.TokensIssued <= before.TokensIssued {
		t.Errorf("401 then retry: unauthorized %d→%d, tokens %d→%d", before.Unauthorized, after.Unauthorized,
			before.TokensIssued, after.TokensIssued)
	}
	// A POST too: a 401 means the request was not processed.
	h.up.Sim().ExpireTokens()
	created := h.create("AFTER-401")
	if st, _ := h.direct(h.tokens, http.MethodGet, "/orders/"+created, nil); st != 200 {
		t.Errorf("order created after a 401: %d", st)
	}

	// 403: another client's order.
	other := newTokens(h.up.Srv.URL, "other", "other")
	st, body := h.direct(other, http.MethodPost, "/orders", []byte(order(h.terminal(), "THEIRS")))
	if st != 201 {
		t.Fatalf("other's order: %d %s", st, body)
	}
	var theirs struct{ ID string }
	_ = json.Unmarshal(body, &theirs)

	h.up.Sim().MarkBooked(id)
	for _, tc := range []struct {
		name, op, body string
		code           int
		want           string
	}{
		{"403 not your order", "orders.get", `{"id":"` + theirs.ID + `"}`, 403, "belongs to another client"},
		{"404", "orders.get", `{"id":"BO-99999999"}`, 404, "not found"},
		{"404 with an odd id", "orders.delete", `{"id":"a/b?c#d"}`, 404, "a/b?c#d"},
		{"409 update", "orders.update", `{"id":"` + id + `","order":` + order(h.terminal(), "X") + `}`, 409, "no longer open"},
		{"409 delete", "orders.delete", `{"id":"` + id + `"}`, 409, "no longer open"},
		{"400 from the upstream", "orders.create", order("NOT-A-TERMINAL", "R"), 400, "is not the id of an ADMINISTRATIVE_TERMINAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.request(tc.op, tc.body)
			if r.code != tc.code || !strings.Contains(r.desc, tc.want) {
				t.Fatalf("%d %q, want %d %q", r.code, r.desc, tc.code, tc.want)
			}
			if got := r.msg.Header.Get(service.UpstreamStatusHeader); got != fmt.Sprint(tc.code) {
				t.Errorf("%s %q", service.UpstreamStatusHeader, got)
			}
			if m := r.messages(t); len(m) != 1 || !strings.Contains(m[0], tc.want) {
				t.Errorf("messages %q: not the upstream's", m)
			}
		})
	}

	tracked := h.up.Sim().TrackedOrders("demo")[0]
	report := fmt.Sprintf(`{"order":{"orderId":%q,"positionId":%q},"event":{"timestamp":"2026-01-02T03:04:05Z","type":"GATE_IN"}}`,
		tracked.OrderID, tracked.PositionID)
	faults := []struct {
		name       string
		faults     sim.Faults
		code       int
		retryAfter string
		want       string
	}{
		{"415", sim.Faults{RejectReports: func([]byte) (int, []string, bool) {
			return http.StatusUnsupportedMediaType, []string{"Content-Type must be application/json"}, true
		}}, 415, "", "Content-Type must be application/json"},
		{"429", sim.Faults{Report429: true, RetryAfter: 3 * time.Second}, 429, "3", "Too many requests"},
		{"503", sim.Faults{ErrorRate: 1, RetryAfter: 2 * time.Second}, 503, "2", "Service temporarily unavailable"},
	}
	for _, tc := range faults {
		t.Run(tc.name, func(t *testing.T) {
			h.up.Sim().SetFaults(tc.faults)
			defer h.up.Sim().SetFaults(sim.Faults{})
			n := h.calls.n.Load()
			r := h.request("tracking.report", report)
			if r.code != tc.code || !strings.Contains(r.desc, tc.want) {
				t.Fatalf("%d %q, want %d %q", r.code, r.desc, tc.code, tc.want)
			}
			if got := r.msg.Header.Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			if h.calls.n.Load() != n+1 {
				t.Errorf("%d upstream calls, want 1", h.calls.n.Load()-n)
			}
			if h.obs.last("tracking.report") != tc.code {
				t.Errorf("observed %d", h.obs.last("tracking.report"))
			}
		})
	}
}

// TestTimeout: a slow upstream is answered 504 by the caller's deadline, and a POST is not sent again.
func TestTimeout(t *testing.T) {
	t.Parallel()
	h := start(t, options{timeout: 5 * time.Second})
	terminal := h.terminal()
	ordersBefore := len(strings.Split(string(h.ok("orders.list", ``)), ","))

	h.up.Sim().SetFaults(sim.Faults{Latency: 2 * time.Second})
	begin := time.Now()
	r := h.request("orders.create", order(terminal, "SLOW"), service.TimeoutHeader, "300ms")
	took := time.Since(begin)
	if r.code != 504 || !strings.Contains(r.desc, "300ms") || !strings.Contains(r.desc, "not repeated") {
		t.Fatalf("%d %q, want 504 within 300ms, not repeated", r.code, r.desc)
	}
	if took > 1500*time.Millisecond {
		t.Errorf("504 after %v", took)
	}
	if n := h.calls.n.Load(); n != 3 { // terminal, list, create
		t.Errorf("%d upstream calls, want 3", n)
	}

	// The configured timeout caps a longer caller deadline.
	h.up.Sim().SetFaults(sim.Faults{Latency: 7 * time.Second})
	r = h.request("orders.list", ``, service.TimeoutHeader, "1h")
	if r.code != 504 || !strings.Contains(r.desc, "5s") {
		t.Errorf("%d %q, want 504 within 5s", r.code, r.desc)
	}
	h.up.Sim().SetFaults(sim.Faults{})
	time.Sleep(2 * time.Second) // let the abandoned create land upstream, as it may
	if n := len(strings.Split(string(h.ok("orders.list", ``)), ",")); n > ordersBefore+1 {
		t.Errorf("orders %d → %d: the create was sent more than once", ordersBefore, n)
	}
}

// TestUnreachableAndNoToken: 503 when the upstream cannot be reached or no token can be had.
func TestUnreachableAndNoToken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String() + "/v1.0"
	l.Close()
	h := start(t, options{upstreamURL: dead})
	r := h.request("orders.list", ``)
	if r.code != 503 || !strings.Contains(r.desc, "cannot be reached") {
		t.Errorf("unreachable: %d %q", r.code, r.desc)
	}
	if r.msg.Header.Get(service.UpstreamStatusHeader) != "" {
		t.Errorf("%s set without an answer", service.UpstreamStatusHeader)
	}

	h2 := start(t, options{sim: sim.Options{Faults: sim.Faults{TokenErrorRate: 1}}})
	r = h2.request("orders.list", ``)
	if r.code != 503 || !strings.Contains(r.desc, "no access token") {
		t.Errorf("no token: %d %q", r.code, r.desc)
	}
	r.messages(t)
}

// TestReplyTooLarge: an answer larger than the server's max_payload gets a clear 502, not silence.
func TestReplyTooLarge(t *testing.T) {
	t.Parallel()
	h := start(t, options{nats: func(o *server.Options) { o.MaxPayload = 16 << 10 }})
	begin := time.Now()
	r := h.request("locations.search", `{"pageSize":1000}`)
	if r.code != 502 || !strings.Contains(r.desc, "max_payload") || !strings.Contains(r.desc, "200") {
		t.Fatalf("%d %q, want 502 naming max_payload and the upstream's 200", r.code, r.desc)
	}
	if time.Since(begin) > 5*time.Second {
		t.Errorf("took %v", time.Since(begin))
	}
	r.messages(t)
	h.ok("locations.search", `{"pageSize":2}`) // a small one still fits
}

// TestBusy: beyond the configured concurrency a request is answered 503 at once, without an upstream call.
func TestBusy(t *testing.T) {
	t.Parallel()
	h := start(t, options{concurrency: 1})
	h.up.Sim().SetFaults(sim.Faults{Latency: time.Second})
	first := make(chan reply, 1)
	go func() { first <- h.request("orders.list", ``) }()
	testutil.Eventually(t, 5*time.Second, "the first call in flight", func() bool { return h.calls.n.Load() == 1 })
	begin := time.Now()
	r := h.request("orders.list", ``)
	if r.code != 503 || !strings.Contains(r.desc, "busy") || time.Since(begin) > 500*time.Millisecond {
		t.Errorf("second request: %d %q after %v, want an immediate 503 busy", r.code, r.desc, time.Since(begin))
	}
	if f := <-first; f.code != 0 {
		t.Errorf("first request: %d %s", f.code, f.desc)
	}
	if n := h.calls.n.Load(); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}
}

// TestDiscovery: nats micro ls, info and stats show the service, its endpoints with their operation
// in the metadata, the queue group, and counts that include the replies made after an upstream call.
func TestDiscovery(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	h.ok("orders.list", ``)
	h.request("orders.get", `{"id":"BO-404"}`)
	h.request("orders.get", `{}`)

	ping := h.control(micro.PingVerb)
	var p micro.Ping
	if err := json.Unmarshal(ping, &p); err != nil || p.Name != service.Name || p.Version != "0.0.0-dev" {
		t.Errorf("ping (nats micro ls): %s", ping)
	}

	var info micro.Info
	if err := json.Unmarshal(h.control(micro.InfoVerb), &info); err != nil {
		t.Fatal(err)
	}
	for _, op := range service.Operations {
		want := map[string]string{"operation": op.OpenAPI + " (" + op.Summary + ")", "upstream": op.Method + " " + op.Path}
		if op.FromNATS() {
			want = map[string]string{"operation": op.Summary, "source": op.Source}
		}
		if !maps.Equal(op.Describe(), want) {
			t.Errorf("%s: metadata %v, want %v", op.Name, op.Describe(), want)
		}
	}
	if len(info.Endpoints) != len(service.Operations) {
		t.Fatalf("info lists %d endpoints, want %d", len(info.Endpoints), len(service.Operations))
	}
	for i, op := range service.Operations {
		e := info.Endpoints[i]
		if e.Subject != "tracking.api."+op.Name || e.QueueGroup != service.QueueGroup ||
			!maps.Equal(e.Metadata, op.Describe()) {
			t.Errorf("endpoint %d: %+v", i, e)
		}
	}

	// micro counts a request after its handler returned, which is after the reply: wait for the count.
	testutil.EventuallyState(t, 5*time.Second, "orders-get stats", func() (bool, string) {
		var stats micro.Stats
		if err := json.Unmarshal(h.control(micro.StatsVerb), &stats); err != nil {
			t.Fatal(err)
		}
		for _, e := range stats.Endpoints {
			if e.Name != "orders-get" {
				continue
			}
			var data service.EndpointStats
			if err := json.Unmarshal(e.Data, &data); err != nil {
				t.Fatalf("stats data %s: %v", e.Data, err)
			}
			ok := e.NumRequests == 2 && data.UpstreamCalls == 1 && data.Errors == 2 && strings.HasPrefix(data.LastError, "400:")
			return ok, fmt.Sprintf("%+v, data %+v", e, data)
		}
		return false, "no stats for orders-get"
	})
}

// control asks the service a micro verb, as the nats CLI does.
func (h *harness) control(v micro.Verb) []byte {
	h.t.Helper()
	subj, err := micro.ControlSubject(v, service.Name, "")
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := h.nc.Request(subj, nil, 5*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.Data
}

// TestReplicas: two replicas in the queue group answer each request once between them.
func TestReplicas(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	second := service.New(h.ns.Connect(), h.calls, service.Config{Prefix: "tracking", Version: "1.2.3"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- second.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, 5*time.Second, "second replica up", func() bool { return second.Ready() == nil })

	sub, err := h.nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for range n {
		if err := h.nc.PublishRequest("tracking.api.orders.list", sub.Subject, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if _, err := sub.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
		t.Errorf("an extra reply: %s", m.Data)
	}
	if c := h.calls.n.Load(); c != n {
		t.Errorf("%d upstream calls, want %d", c, n)
	}
}

// TestStopAnswersInFlight: stopping lets the calls in flight finish and answer.
func TestStopAnswersInFlight(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	h.up.Sim().SetFaults(sim.Faults{Latency: 500 * time.Millisecond})
	var wg sync.WaitGroup
	replies := make(chan reply, 3)
	for range 3 {
		wg.Go(func() { replies <- h.request("orders.list", ``) })
	}
	testutil.Eventually(t, 5*time.Second, "calls in flight", func() bool { return h.calls.n.Load() == 3 })
	h.stop()
	wg.Wait()
	close(replies)
	for r := range replies {
		if r.code != 0 {
			t.Errorf("in-flight request: %d %s", r.code, r.desc)
		}
	}
	if _, err := h.nc.Request("tracking.api.orders.list", nil, 300*time.Millisecond); err == nil {
		t.Error("a request answered after the stop")
	}
}
