package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/tracking-bridge/tracking-bridge/api"
)

// conformance checks every answer of the simulator's API operations against the OpenAPI document
// (openapi3filter.ValidateResponse: the status is declared, headers and body match its schema), and
// records which statuses each operation answered. Every test's simulator (newEnv) goes through it. A
// stream's body is not checked: it does not end. Answers the test scripted to break the document
// (Faults.RejectReports, Faults.StreamContentType) are not checked either.
type conformance struct {
	t    testing.TB
	s    *Server
	next http.Handler

	mu   sync.Mutex
	seen map[string][]int // "GET /orders/{id}" → statuses answered
}

func newConformance(t testing.TB, s *Server) *conformance {
	return &conformance{t: t, s: s, next: s.Handler(), seen: make(map[string][]int)}
}

// recorder passes an answer through and keeps its status, header and (bounded) body.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len() < 4<<20 {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (c *conformance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, pattern := c.s.mux.Handler(r)
	method, path, _ := strings.Cut(pattern, " ")
	path, isAPI := strings.CutPrefix(path, c.s.base)
	route := c.s.doc.route(method, path)
	if !isAPI || route == nil {
		c.next.ServeHTTP(w, r)
		return
	}
	rec := &recorder{ResponseWriter: w}
	c.next.ServeHTTP(rec, r)
	f := c.s.Faults()
	if f.RejectReports != nil || f.StreamContentType != "" || rec.status == 0 {
		return
	}
	op := method + " " + path
	c.mu.Lock()
	if !slices.Contains(c.seen[op], rec.status) {
		c.seen[op] = append(c.seen[op], rec.status)
	}
	c.mu.Unlock()
	opts := documentOptions()
	opts.IncludeResponseStatus = true
	opts.ExcludeResponseBody = rec.status == http.StatusOK && path == "/tracking/events/stream"
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, Route: route, Options: opts},
		Status:                 rec.status,
		Header:                 w.Header(),
		Options:                opts,
	}
	in.SetBodyBytes(rec.body.Bytes())
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.t.Errorf("%s %s answered %d, not as the OpenAPI document says: %v\nbody: %.500s", r.Method, r.URL, rec.status, err, rec.body.Bytes())
	}
}

// statuses returns the statuses answered by op so far.
func (c *conformance) statuses(op string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.seen[op]))
}

// TestOpenAPIEveryOperation calls every operation of the document so that it answers each status the
// document declares for it (conformance checks each answer), and fails for a declared status no call
// produced.
func TestOpenAPIEveryOperation(t *testing.T) {
	e := newEnv(t, Options{Retention: 1000})
	tok, other := e.login("demo"), e.login("other")
	x := e.sim.TrackedOrders("demo")[2]
	foreign := e.sim.TrackedOrders("other")[2]
	expired := e.login("demo")
	created := func(tok string) string {
		r := e.do("POST", "/orders", tok, validOrder())
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		var c struct{ ID string }
		_ = json.Unmarshal(r.Body, &c)
		return c.ID
	}
	mine, theirs, booked := created(tok), created(other), created(tok)
	e.sim.MarkBooked(booked)
	track := url.Values{"orderId": {x.OrderID}, "positionId": {x.PositionID}}.Encode()
	trackForeign := url.Values{"orderId": {foreign.OrderID}, "positionId": {foreign.PositionID}}.Encode()
	good := report(x, "GATE_IN")
	foreignReport := report(foreign, "GATE_IN")
	unknownReport := report(TrackingOrder{OrderID: "nope", PositionID: "1"}, "GATE_IN")

	type call struct {
		method, path string
		body         any
		ctype        string
		token        string
		want         int
	}
	calls := []call{
		{"GET", "/locations?type=SEAPORT&page=1&pageSize=5", nil, "", tok, 200},
		{"GET", "/locations?page=0", nil, "", tok, 400},
		{"GET", "/orders", nil, "", tok, 200},
		{"POST", "/orders", validOrder(), "", tok, 201},
		{"POST", "/orders", map[string]any{}, "", tok, 400},
		{"POST", "/orders", validOrder(), "text/plain", tok, 415},
		{"GET", "/orders/" + mine, nil, "", tok, 200},
		{"GET", "/orders/" + theirs, nil, "", tok, 403},
		{"GET", "/orders/nope", nil, "", tok, 404},
		{"PUT", "/orders/" + mine, validOrder(), "", tok, 200},
		{"PUT", "/orders/" + mine, map[string]any{"action": "THROW"}, "", tok, 400},
		{"PUT", "/orders/" + mine, validOrder(), "text/plain", tok, 415},
		{"PUT", "/orders/" + theirs, validOrder(), "", tok, 403},
		{"PUT", "/orders/nope", validOrder(), "", tok, 404},
		{"PUT", "/orders/" + booked, validOrder(), "", tok, 409},
		{"DELETE", "/orders/" + theirs, nil, "", tok, 403},
		{"DELETE", "/orders/nope", nil, "", tok, 404},
		{"DELETE", "/orders/" + booked, nil, "", tok, 409},
		{"DELETE", "/orders/" + mine, nil, "", tok, 200},
		{"GET", "/tracking?" + track, nil, "", tok, 200},
		{"GET", "/tracking?orderId=1", nil, "", tok, 400},
		{"GET", "/tracking?" + trackForeign, nil, "", tok, 403},
		{"GET", "/tracking?orderId=nope&positionId=1", nil, "", tok, 404},
		{"POST", "/tracking/events", good, "", tok, 202},
		{"POST", "/tracking/events", map[string]any{}, "", tok, 400},
		{"POST", "/tracking/events", good, "text/plain", tok, 415},
		{"POST", "/tracking/events", foreignReport, "", tok, 403},
		{"POST", "/tracking/events", unknownReport, "", tok, 404},
	}
	do := func(c call) {
		t.Helper()
		var hdr []string
		if c.ctype != "" {
			hdr = []string{"Content-Type", c.ctype}
		}
		if r := e.do(c.method, c.path, c.token, c.body, hdr...); r.Status != c.want {
			t.Errorf("%s %s: %d, want %d: %s", c.method, c.path, r.Status, c.want, r.Body)
		}
	}
	for _, c := range calls {
		do(c)
	}
	// The stream: 200, and the statuses of its faults.
	resp := e.openStream(tok, "")
	if resp.StatusCode != 200 {
		t.Errorf("stream: %d", resp.StatusCode)
	}
	resp.Body.Close()
	for _, code := range []int{403, 404} {
		e.sim.SetFaults(Faults{StreamStatus: code})
		if r := e.do("GET", "/tracking/events/stream", tok, nil); r.Status != code {
			t.Errorf("stream fault %d: %d", code, r.Status)
		}
	}
	// 429 and 5xx of the report operation, 503 and 401 of every operation.
	e.sim.SetFaults(Faults{Report429: true, RetryAfter: 1})
	do(call{"POST", "/tracking/events", good, "", tok, 429})
	e.sim.SetFaults(Faults{ReportErrorRate: 1})
	for range 40 {
		e.do("POST", "/tracking/events", tok, good)
	}
	ops := []call{
		{"GET", "/locations", nil, "", "", 0}, {"GET", "/orders", nil, "", "", 0},
		{"POST", "/orders", validOrder(), "", "", 0}, {"GET", "/orders/x", nil, "", "", 0},
		{"PUT", "/orders/x", validOrder(), "", "", 0}, {"DELETE", "/orders/x", nil, "", "", 0},
		{"GET", "/tracking?" + track, nil, "", "", 0}, {"POST", "/tracking/events", good, "", "", 0},
		{"GET", "/tracking/events/stream", nil, "", "", 0},
	}
	e.sim.SetFaults(Faults{ErrorRate: 1, RetryAfter: 1})
	for _, c := range ops {
		c.token, c.want = tok, 503
		do(c)
	}
	e.sim.SetFaults(Faults{})
	e.sim.ExpireTokens()
	for _, c := range ops {
		for _, token := range []string{"", "not-a-token", expired} {
			c.token, c.want = token, 401
			do(c)
		}
	}

	doc, err := api.Document()
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			got := e.conf.statuses(method + " " + path)
			for code := range op.Responses.Map() {
				if code == "5XX" {
					for _, c := range []int{500, 502, 504} {
						if !slices.Contains(got, c) {
							t.Errorf("%s %s: no call answered %d (5XX)", method, path, c)
						}
					}
					continue
				}
				n, _ := strconv.Atoi(code)
				if !slices.Contains(got, n) {
					t.Errorf("%s %s: no call answered %s, which the document declares", method, path, code)
				}
			}
			t.Logf("%s %s answered %v", method, path, got)
		}
	}
}

// The document is served, without authentication, as the api package has it.
func TestServeOpenAPI(t *testing.T) {
	e := newEnv(t, Options{})
	resp, err := http.Get(e.ts.URL + OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(b, api.OpenAPI()) || !strings.Contains(resp.Header.Get("Content-Type"), "yaml") {
		t.Errorf("GET %s: %d %q, %d bytes", OpenAPIPath, resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil || doc.OpenAPI != "3.0.3" {
		t.Errorf("served document: %v", err)
	}
}

// The document's request checks answer in the simulator's style: a property path and what is wrong.
func TestDocumentProblems(t *testing.T) {
	d, err := newDocument()
	if err != nil {
		t.Fatal(err)
	}
	route := d.route("POST", "/tracking/events")
	body := `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"A","observation":{"observedLoadingUnit":` +
		`{"seals":[{"type":"WAX"}],"loadingState":null}}}}`
	r, _ := http.NewRequest("POST", "/v1.0/tracking/events", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	got := d.check(r, route)
	want := []string{
		"event.observation.observedLoadingUnit.loadingState must not be null (the document does not mark it nullable)",
		"event.observation.observedLoadingUnit.seals[0].type: value is not one of the allowed values",
	}
	slices.Sort(got)
	if len(got) != len(want) {
		t.Fatalf("problems %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %q, want %q…", got[i], want[i])
		}
	}
	if b, _ := io.ReadAll(r.Body); string(b) != body {
		t.Errorf("body after the check %q", b)
	}
}

// captureTB keeps the errors reported to it instead of failing the test.
type captureTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (c *captureTB) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// conformance does catch answers the document does not describe.
func TestConformanceCatchesDeviations(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	for _, tt := range []struct {
		name   string
		answer func(w http.ResponseWriter)
	}{
		{"ids not an array", func(w http.ResponseWriter) { writeJSON(w, 200, map[string]any{"ids": 5}) }},
		{"ids missing", func(w http.ResponseWriter) { writeJSON(w, 200, map[string]any{}) }},
		{"undeclared status", func(w http.ResponseWriter) { writeMessages(w, http.StatusTeapot, "tea") }},
		{"401 without WWW-Authenticate", func(w http.ResponseWriter) { writeMessages(w, 401, "who") }},
	} {
		ctb := &captureTB{TB: t}
		c := newConformance(ctb, s)
		c.next = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { tt.answer(w) })
		r, _ := http.NewRequest("GET", s.base+"/orders", nil)
		c.ServeHTTP(httptest.NewRecorder(), r)
		if len(ctb.errs) != 1 {
			t.Errorf("%s: conformance reported %q, want one error", tt.name, ctb.errs)
		}
	}
}

// Where the document and the simulator's own checks could disagree, the provider's rules decide
// (docs/openapi.md).
func TestDocumentAndOwnChecks(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	x := e.sim.TrackedOrders("demo")[1]
	rep := func(f func(r, ev map[string]any)) map[string]any {
		r := report(x, "GATE_IN")
		f(r, r["event"].(map[string]any))
		return r
	}
	tests := []struct {
		name, method, path string
		body               any
		wantCode           int
		wantMsg            string
	}{
		// Only fields marked nullable may be null; the simulator took null for absent.
		{"optional object null", "POST", "/tracking/events", rep(func(r, _ map[string]any) { r["order"] = nil }), 400,
			"order must not be null (the document does not mark it nullable)"},
		{"optional string null", "POST", "/tracking/events", rep(func(_, ev map[string]any) { ev["id"] = nil }), 400,
			"event.id must not be null (the document does not mark it nullable)"},
		{"optional array null", "POST", "/orders", edit(func(_, u, _ map[string]any) { u["seals"] = nil }), 400,
			"unit.seals must not be null (the document does not mark it nullable)"},
		{"optional enumeration null", "POST", "/orders", edit(func(_, u, _ map[string]any) { u["condition"] = nil }), 400,
			"unit.condition must not be null (the document does not mark it nullable)"},
		{"nullable field null", "POST", "/orders", edit(func(_, u, _ map[string]any) { u["number"] = nil }), 201, ""},
		// RFC 3339 allows a lower-case t and z (section 5.6); kin-openapi's own pattern does not.
		{"lower-case t and z", "POST", "/tracking/events", rep(func(_, ev map[string]any) { ev["timestamp"] = "2024-05-01t12:30:00z" }), 202, ""},
		// readOnly: a client should not send the id; the simulator ignores it, as it always did.
		{"id in a create body", "POST", "/orders", edit(func(o, _, _ map[string]any) { o["id"] = "BO-1" }), 201, ""},
		// An empty query parameter counts as absent (allowEmptyValue), as the simulator always read it.
		{"empty query parameters", "GET", "/locations?type=&name=&page=&pageSize=", nil, 200, ""},
		// The simulator's own rules beyond the document.
		{"planned date without a date", "POST", "/orders", edit(func(_, _, cc map[string]any) {
			cc["plannedDate"] = map[string]any{"timeOfDay": "EARLY"}
		}), 400, "clientContext.plannedDate.date is missing"},
		{"blank reference", "POST", "/orders", edit(func(o, _, _ map[string]any) { o["reference"] = " " }), 400, "reference must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.method, tt.path, tok, tt.body)
			if r.Status != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", r.Status, tt.wantCode, r.Body)
			}
			if tt.wantMsg != "" {
				if m := r.messages(t); len(m) != 1 || m[0] != tt.wantMsg {
					t.Errorf("messages %q, want [%q]", m, tt.wantMsg)
				}
			}
		})
	}
}
