package upstream

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestStreamMetricsDoNotAllocate: what the stream tells of every read and every event costs no
// allocation.
func TestStreamMetricsDoNotAllocate(t *testing.T) {
	m := NewStreamMetrics(prometheus.NewRegistry())
	ev := &Event{ID: "ev-1", Data: []byte(`{}`)}
	for name, f := range map[string]func(){
		"Received":  func() { m.Received(ev) },
		"Heartbeat": m.Heartbeat,
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}

// TestStreamMetrics: the stream's counters and its state at scrape time; every disconnect reason has its
// series from start-up, one outside the set counts as error, and no event id is ever a label.
func TestStreamMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewStreamMetrics(reg)
	state := StateReconnecting
	RegisterStreamState(reg, func() StreamState { return state })
	m.Connected()
	m.Disconnected(DisconnectIdle)
	m.Disconnected("something new")
	m.Received(&Event{ID: "ev-\xff" + strings.Repeat("x", 200)})
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bridge_stream_connects_total", nil, 1},
		{"bridge_events_received_total", nil, 1},
		{"bridge_stream_disconnects_total", map[string]string{"reason": "eof"}, 0},
		{"bridge_stream_disconnects_total", map[string]string{"reason": "idle"}, 1},
		{"bridge_stream_disconnects_total", map[string]string{"reason": "error"}, 1},
		{"bridge_stream_state", map[string]string{"state": "reconnecting"}, 1},
		{"bridge_stream_state", map[string]string{"state": "connected"}, 0},
	} {
		if got := testutil.Metric(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if n := len(testutil.MetricSeries(t, reg, "bridge_stream_state")); n != len(streamStates) {
		t.Errorf("%d bridge_stream_state series, want %d", n, len(streamStates))
	}
	if n := len(testutil.MetricSeries(t, reg, "bridge_stream_disconnects_total")); n != len(disconnectReasons) {
		t.Errorf("%d bridge_stream_disconnects_total series, want %d", n, len(disconnectReasons))
	}
	if age := testutil.Metric(t, reg, "bridge_stream_last_event_age_seconds", nil); age < 0 || age > 60 {
		t.Errorf("bridge_stream_last_event_age_seconds = %v", age)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.Contains(mf.String(), "ev-") {
			t.Errorf("%s carries an event id", mf.GetName())
		}
	}
}

// TestStreamActivity: what the status page shows of the stream, from its metrics.
func TestStreamActivity(t *testing.T) {
	t.Parallel()
	m := NewStreamMetrics(prometheus.NewRegistry())
	if a := m.Activity(); a != (StreamActivity{}) {
		t.Errorf("before any byte: %+v, want the zero value", a)
	}
	m.Heartbeat()
	a := m.Activity()
	if a.LastBytes.IsZero() || !a.LastEvent.IsZero() || a.LastID != "" {
		t.Errorf("after a keep-alive: %+v, want only LastBytes", a)
	}
	m.Received(&Event{ID: "ev-7"})
	m.Received(&Event{}) // without an id: the last id stays
	a = m.Activity()
	if a.LastID != "ev-7" || a.LastEvent.IsZero() || a.LastEvent.After(a.LastBytes) {
		t.Errorf("after two events: %+v, want id ev-7 and the event's time from its bytes", a)
	}
}

// TestTokenObserved: token requests by kind and result, every pair there from start-up.
func TestTokenObserved(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m := NewClientMetrics(reg)
	m.TokenObserved("login", nil)
	m.TokenObserved("login", fmt.Errorf("x: %w", ErrLoginRejected))
	m.TokenObserved("refresh", fmt.Errorf("x: %w", ErrTokenEndpoint))
	m.TokenObserved("refresh", errors.New("refresh rejected: HTTP 400 invalid_grant"))
	m.TokenObserved("unknown", nil)
	for kr, want := range map[[2]string]float64{
		{"login", "ok"}: 1, {"login", "rejected"}: 1, {"login", "unavailable"}: 0,
		{"refresh", "ok"}: 0, {"refresh", "rejected"}: 1, {"refresh", "unavailable"}: 1,
	} {
		if got := testutil.Metric(t, reg, "bridge_token_requests_total", map[string]string{"kind": kr[0], "result": kr[1]}); got != want {
			t.Errorf("%v = %v, want %v", kr, got, want)
		}
	}
	if n := len(testutil.MetricSeries(t, reg, "bridge_token_requests_total")); n != 6 {
		t.Errorf("%d series, want 6", n)
	}
}

// TestInstrumentTransport: every request is timed by operation and status code, "error" without an
// answer; labelling one costs no allocation once its series exists.
func TestInstrumentTransport(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewClientMetrics(reg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	c := &http.Client{Transport: m.InstrumentTransport(nil, func(r *http.Request) string {
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
		want     float64
	}{{"token", "200", 1}, {"report", "503", 2}, {"token", "error", 1}} {
		got := testutil.Metric(t, reg, "bridge_upstream_request_duration_seconds", map[string]string{"operation": tc.op, "code": tc.code})
		if got != tc.want {
			t.Errorf("%s/%s: %v observations, want %v", tc.op, tc.code, got, tc.want)
		}
	}
	op, code := "report", 503
	if n := testing.AllocsPerRun(100, func() {
		m.requests.WithLabelValues(op, metrics.StatusCode(code)).Observe(time.Millisecond.Seconds())
	}); n != 0 {
		t.Errorf("labelling a request allocates %v times", n)
	}
}
