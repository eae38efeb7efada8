package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/event"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// series returns "name{k=v,...} value" for every series of reg, labels in the family's order; a
// histogram's value is its count.
func series(t *testing.T, reg *Registry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, f := range reg.Gather() {
		for _, s := range f.Samples {
			name := s.Name
			if f.Type == TypeHistogram {
				if name != f.Name+"_count" {
					continue
				}
				name = f.Name
			}
			var labels []string
			for _, l := range s.Labels {
				labels = append(labels, l.Name+"="+l.Value)
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = s.Value
		}
	}
	return out
}

func newTest(t *testing.T) (*Metrics, *Registry) {
	t.Helper()
	reg := NewRegistry()
	return New(reg, BuildInfo{Version: "v1", Commit: "abc", GoVersion: "go1.26"}), reg
}

func TestTypeCardinalityIsCapped(t *testing.T) {
	m, reg := newTest(t)
	for i := range MaxTypes + 50 {
		m.Publish.Published(fmt.Sprintf("TYPE_%d", i))
		m.Publish.Published(fmt.Sprintf("TYPE_%d", i))
	}
	if got := m.Publish.publishedBy.With(OtherType).Value(); got != 100 {
		t.Errorf("other = %v, want 100 (50 types beyond the cap, twice each)", got)
	}
	if got := m.Publish.publishedBy.With("TYPE_0").Value(); got != 2 {
		t.Errorf("TYPE_0 = %v, want 2", got)
	}
	n := 0
	for k := range series(t, reg) {
		if strings.HasPrefix(k, "bridge_events_published_total{") {
			n++
		}
	}
	if n != MaxTypes+1 {
		t.Errorf("%d series, want %d", n, MaxTypes+1)
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	m, _ := newTest(t)
	ev := &event.Event{ID: "ev-1", Data: []byte(`{}`)}
	m.Publish.Published("GATE_IN") // the first time creates the series
	for name, f := range map[string]func(){
		"Received":   func() { m.Stream.Received(ev) },
		"Heartbeat":  m.Stream.Heartbeat,
		"Published":  func() { m.Publish.Published("GATE_IN") },
		"AckLatency": func() { m.Publish.AckLatency(time.Millisecond) },
		"Outcome":    func() { m.Reports.Outcome("accepted", "2xx") },
		"Consumed":   m.Reports.Consumed,
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}

func TestObserverLabels(t *testing.T) {
	m, reg := newTest(t)
	m.Stream.Connected()
	m.Stream.Disconnected("idle")
	m.Stream.Disconnected("something new")
	m.Publish.DeadLettered("not_json")
	m.Publish.DeadLettered("unheard of")
	m.Tokens.TokenObserved("login", nil)
	m.Tokens.TokenObserved("login", fmt.Errorf("x: %w", upstream.ErrLoginRejected))
	m.Tokens.TokenObserved("refresh", fmt.Errorf("x: %w", upstream.ErrTokenEndpoint))
	m.Tokens.TokenObserved("refresh", errors.New("refresh rejected: HTTP 400 invalid_grant"))
	m.Reports.Outcome("retry", "5xx")
	m.Reports.Outcome("new_kind", "none")
	m.Publish.PublishRetried(errors.New("timeout"))
	m.API.APIRefused("reply_not_inbox")
	m.API.APIRefused("reply_not_inbox")

	got := series(t, reg)
	for k, v := range map[string]float64{
		"bridge_stream_connects_total{}":                                    1,
		"bridge_stream_disconnects_total{reason=eof}":                       0,
		"bridge_stream_disconnects_total{reason=error}":                     1,
		"bridge_stream_disconnects_total{reason=idle}":                      1,
		"bridge_token_requests_total{kind=login,result=ok}":                 1,
		"bridge_token_requests_total{kind=login,result=rejected}":           1,
		"bridge_token_requests_total{kind=login,result=unavailable}":        0,
		"bridge_token_requests_total{kind=refresh,result=rejected}":         1,
		"bridge_token_requests_total{kind=refresh,result=unavailable}":      1,
		"bridge_events_dead_lettered_total{reason=not_json}":                1,
		"bridge_events_dead_lettered_total{reason=other}":                   1,
		"bridge_reports_outcomes_total{outcome=retry,status_class=5xx}":     1,
		"bridge_reports_outcomes_total{outcome=new_kind,status_class=none}": 1,
		"bridge_publish_retries_total{}":                                    1,
		"bridge_api_requests_refused_total{reason=no_reply}":                0,
		"bridge_api_requests_refused_total{reason=reply_invalid}":           0,
		"bridge_api_requests_refused_total{reason=reply_not_inbox}":         2,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

func TestScrapeTimeSources(t *testing.T) {
	m, reg := newTest(t)
	m.Stream.Received(&event.Event{ID: "ev-\xff" + strings.Repeat("x", 200)})
	m.SetSources(Sources{
		StreamState:    func() upstream.StreamState { return upstream.StateReconnecting },
		ReportsPending: func() uint64 { return 7 },
		NATSConnected:  func() bool { return true },
		NATSReconnects: func() uint64 { return 3 },
		Readiness:      func() map[string]bool { return map[string]bool{"nats": true, "upstream_stream": false} },
	})
	requireUnique(t, reg) // what the client library's pedantic registry checked
	got := map[string]string{}
	for k, v := range series(t, reg) {
		got[k] = fmt.Sprint(v)
	}
	for k, v := range map[string]string{
		"bridge_stream_state{state=reconnecting}":                    "1",
		"bridge_stream_state{state=connected}":                       "0",
		"bridge_reports_pending{}":                                   "7",
		"bridge_nats_connected{}":                                    "1",
		"bridge_nats_reconnects_total{}":                             "3",
		"bridge_ready{check=nats}":                                   "1",
		"bridge_ready{check=upstream_stream}":                        "0",
		"bridge_build_info{commit=abc,go_version=go1.26,version=v1}": "1",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %s", k, got[k], v)
		}
	}
	// Event ids change with every event: they are on the status page, never in a label (each new value
	// would start a new series).
	for k := range got {
		if strings.Contains(k, "ev-") {
			t.Errorf("series %s carries an event id", k)
		}
	}
}

func TestStreamActivity(t *testing.T) {
	m, _ := newTest(t)
	if a := m.Stream.Activity(); a != (StreamActivity{}) {
		t.Errorf("before any byte: %+v, want the zero value", a)
	}
	m.Stream.Heartbeat()
	a := m.Stream.Activity()
	if a.LastBytes.IsZero() || !a.LastEvent.IsZero() || a.LastID != "" {
		t.Errorf("after a keep-alive: %+v, want only LastBytes", a)
	}
	m.Stream.Received(&event.Event{ID: "ev-7"})
	m.Stream.Received(&event.Event{}) // without an id: the last id stays
	a = m.Stream.Activity()
	if a.LastID != "ev-7" || a.LastEvent.IsZero() || a.LastEvent.After(a.LastBytes) {
		t.Errorf("after two events: %+v, want id ev-7 and the event's time from its bytes", a)
	}
}

func TestInstrumentTransport(t *testing.T) {
	m, _ := newTest(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	c := &http.Client{Transport: m.Upstream.InstrumentTransport(nil, func(r *http.Request) string {
		if r.URL.Path == "/busy" {
			return "report"
		}
		return "token"
	})}
	for _, p := range []string{"/", "/busy", "/busy"} {
		resp, err := c.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if _, err := c.Get("http://127.0.0.1:1/"); err == nil {
		t.Fatal("want a connection error")
	}
	for _, tc := range []struct {
		op, code string
		want     int
	}{{"token", "200", 1}, {"report", "503", 2}, {"token", "error", 1}} {
		if got := int(m.Upstream.requests.With(tc.op, tc.code).Count()); got != tc.want {
			t.Errorf("%s/%s: %d observations, want %d", tc.op, tc.code, got, tc.want)
		}
	}
	if statusCode(299) != "2xx" || statusCode(404) != "404" || statusCode(1000) != "other" {
		t.Error("statusCode")
	}
}

func BenchmarkPerEvent(b *testing.B) {
	m := New(NewRegistry(), BuildInfo{})
	ev := &event.Event{ID: "ev-1", Data: []byte(`{}`)}
	types := []string{"GATE_IN", "GATE_OUT", "ARRIVED", "DEPARTED", "HANDLING_STARTED", "HANDLING_FINISHED"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.Stream.Heartbeat()
		m.Stream.Received(ev)
		m.Publish.Published(types[i%len(types)])
		m.Publish.AckLatency(time.Millisecond)
	}
}

// TestDocumented: docs/operations.md's metrics reference names every metric, and no other.
func TestDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, ref, ok := strings.Cut(string(raw), "## Metrics reference")
	if !ok {
		t.Fatal("docs/operations.md has no metrics reference")
	}
	ref, _, _ = strings.Cut(ref, "\n## ")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(bridge_[a-z_]+)`").FindAllStringSubmatch(ref, -1) {
		documented[m[1]] = true
	}

	reg := NewRegistry()
	m := New(reg, BuildInfo{})
	m.SetSources(Sources{
		StreamState:    func() upstream.StreamState { return upstream.StateConnected },
		ReportsPending: func() uint64 { return 0 },
		NATSConnected:  func() bool { return true },
		NATSReconnects: func() uint64 { return 0 },
		Readiness:      func() map[string]bool { return map[string]bool{"nats": true} },
		Leader:         func() bool { return true },
	})
	m.Publish.Published("X")
	m.Publish.AckLatency(0)
	rt := m.Upstream.InstrumentTransport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}), func(*http.Request) string { return "token" })
	if _, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil)); err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range reg.Gather() {
		exported[f.Name] = true
		if !documented[f.Name] {
			t.Errorf("%s is not in the metrics reference of docs/operations.md", f.Name)
		}
	}
	for name := range documented {
		if !exported[name] {
			t.Errorf("docs/operations.md documents %s, which is not exported", name)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// BenchmarkScrape: one GET /metrics of the daemon's registry (its metrics, the runtime's and the
// process's), written to a recorder.
func BenchmarkScrape(b *testing.B) {
	reg := NewRegistry()
	RegisterRuntime(reg)
	m := New(reg, BuildInfo{Version: "v", Commit: "c", GoVersion: "go"})
	m.Publish.Published("GATE_IN")
	h := Handler(reg)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
}
