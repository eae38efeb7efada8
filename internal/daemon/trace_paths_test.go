package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// Tracing of the paths NATS clients drive, reports and the API, through a whole bridge against a real
// OTLP/HTTP collector and the simulator over HTTP.

// A caller's trace context, as a producer or an API client would send it.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	callerTP    = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// hostileTraceparents are traceparent values a hostile caller might send: malformed, and 10 KiB long (a
// valid one of a later version, whose added fields OpenTelemetry accepts at any length, so that only the
// bridge's bound of 256 characters refuses it). Each must be ignored: the span starts a trace of its own.
var hostileTraceparents = []string{
	"00-zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz-00f067aa0ba902b7-01",
	"01" + callerTP[2:] + "-" + strings.Repeat("z", 10<<10),
}

// hostileMark is in every hostile value, to look for in spans and replies.
const hostileMark = "zzzzzzzzzzzzzzzz"

// publishReport publishes one report to P.reports with JetStream, with id and the headers hdr.
func publishReport(t *testing.T, ns *testutil.NATS, id string, body []byte, hdr map[string]string) {
	t.Helper()
	js, _ := jetstream.New(ns.Connect())
	m := nats.NewMsg("tracking.reports")
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, id)
	for k, v := range hdr {
		m.Header[k] = []string{v} // lower case, as W3C writes them
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publishing report %s: %v", id, err)
	}
}

// spanOf waits for the span of name whose attribute key is value, and returns it.
func spanOf(t *testing.T, rcv *testutil.OTLPReceiver, name, key string, value any) testutil.ReceivedSpan {
	t.Helper()
	var got testutil.ReceivedSpan
	testutil.Eventually(t, 15*time.Second, fmt.Sprintf("the span %q with %s=%v", name, key, value), func() bool {
		found := rcv.Find(func(s testutil.ReceivedSpan) bool { return s.Name == name && s.Attrs[key] == value })
		if len(found) == 0 {
			return false
		}
		got = found[0]
		return true
	})
	return got
}

// childOf returns the spans whose parent is span id.
func childOf(rcv *testutil.OTLPReceiver, id string) []testutil.ReceivedSpan {
	return rcv.Find(func(s testutil.ReceivedSpan) bool { return s.Parent == id })
}

// noHostileValue fails when any received span, or s, holds a part of a hostile traceparent.
func noHostileValue(t *testing.T, rcv *testutil.OTLPReceiver, also ...string) {
	t.Helper()
	all := fmt.Sprintf("%+v", rcv.Spans())
	for _, s := range append(also, all) {
		if strings.Contains(s, hostileMark) || strings.Contains(s, "HHHHHHHH") {
			t.Errorf("a hostile traceparent is echoed: %s", s[:min(len(s), 300)])
		}
	}
}

// upstreamCarries reports whether a request to the upstream's path carried a traceparent of trace.
func upstreamCarries(up *simtest.Upstream, path, trace string) bool {
	for _, tp := range up.Traceparents()[path] {
		if strings.HasPrefix(tp, "00-"+trace+"-") {
			return true
		}
	}
	return false
}

// TestReportTraces: a report with a traceparent is processed in a consumer span of the caller's trace,
// its parent the caller's span, with the messaging attributes and its acknowledgement; the upstream POST
// is a client span inside it and the upstream's request carries the trace; the span of the event the
// upstream streams back links to the report's, and the two traces render as docs/operations.md's
// waterfall shows (checkWaterfall); a report without one starts
// a trace; an invalid and a rejected report's spans say they were dead-lettered; a report the upstream
// answers 503 once has a span per delivery, both in the caller's trace, the first with its redelivery
// and delay; a hostile traceparent is ignored and never echoed.
func TestReportTraces(t *testing.T) {
	t.Parallel()
	rcv, ns, up, cfg := tracedBridge(t)
	var unavailable atomic.Bool // the next report "HH-TB 9" is answered 503 once
	unavailable.Store(true)
	up.Sim().SetFaults(sim.Faults{RejectReports: func(body []byte) (int, []string, bool) {
		switch {
		case strings.Contains(string(body), `HH-TB 7"`):
			return 422, []string{"refused by the test"}, true
		case strings.Contains(string(body), `HH-TB 9"`) && unavailable.CompareAndSwap(true, false):
			return 503, []string{"unavailable for the test"}, true
		}
		return 0, nil, false
	}})
	reportPath := sim.DefaultBasePath + cfg.ReportPath

	body := opsReport(up, 1)
	publishReport(t, ns, "traced-1", body, map[string]string{"traceparent": callerTP, "tracestate": "vendor=abc"})
	s := spanOf(t, rcv, "process tracking.reports", "messaging.message.id", "traced-1")
	if s.TraceID != callerTrace || s.Parent != callerSpan || s.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
		t.Errorf("report span: trace %s parent %s kind %v; want trace %s parent %s, consumer", s.TraceID, s.Parent, s.Kind, callerTrace, callerSpan)
	}
	want := map[string]any{"messaging.system": "nats", "messaging.operation.type": "process",
		"messaging.destination.name": "tracking.reports", "messaging.message.body.size": int64(len(body)),
		"messaging.nats.delivery_count": int64(1), "bridge.report.outcome": "accepted",
		"bridge.upstream.status_code": int64(202)}
	for k, v := range want {
		if s.Attrs[k] != v {
			t.Errorf("report span attribute %s = %v (%T), want %v", k, s.Attrs[k], s.Attrs[k], v)
		}
	}
	if !slices.Contains(s.Events, "acknowledged") || s.Status == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("report span events %v status %v: want acknowledged, no error", s.Events, s.Status)
	}
	post := childOf(rcv, s.SpanID)
	if len(post) != 1 || post[0].Kind != tracepb.Span_SPAN_KIND_CLIENT || !strings.HasPrefix(post[0].Name, "POST") {
		t.Errorf("the report span's children %+v: want one client span of the upstream POST", post)
	}
	if !upstreamCarries(up, reportPath, callerTrace) {
		t.Errorf("the upstream's report requests carried %q, none of trace %s", up.Traceparents()[reportPath], callerTrace)
	}
	// The upstream streams the reported event back: its span links to the report's.
	reportLink := callerTrace + "/" + s.SpanID
	var event testutil.ReceivedSpan
	testutil.EventuallyState(t, 15*time.Second, "the reported event's span linked to the report's", func() (bool, string) {
		events := rcv.Find(func(e testutil.ReceivedSpan) bool {
			return e.Attrs["messaging.destination.name"] == "tracking.events.GATE_IN.MSCU1234565"
		})
		for _, e := range events {
			if slices.Contains(e.Links, reportLink) {
				event = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d spans of the event, links %v", len(events), func() (l [][]string) {
			for _, e := range events {
				l = append(l, e.Links)
			}
			return
		}())
	})
	checkWaterfall(t, rcv, s, event)

	publishReport(t, ns, "untraced-2", opsReport(up, 2), nil)
	s = spanOf(t, rcv, "process tracking.reports", "messaging.message.id", "untraced-2")
	if s.Parent != "" || s.TraceID == callerTrace {
		t.Errorf("a report without traceparent: span trace %s parent %q, want a trace of its own", s.TraceID, s.Parent)
	}
	if !upstreamCarries(up, reportPath, s.TraceID) {
		t.Errorf("the upstream's report requests carried %q, none of the report's own trace %s", up.Traceparents()[reportPath], s.TraceID)
	}

	publishReport(t, ns, "invalid-3", []byte(`{"order":{}}`), map[string]string{"traceparent": callerTP})
	s = spanOf(t, rcv, "process tracking.reports", "messaging.message.id", "invalid-3")
	if s.TraceID != callerTrace || !slices.Contains(s.Events, "dead_lettered") || s.Status != tracepb.Status_STATUS_CODE_ERROR ||
		s.Attrs["bridge.report.outcome"] != "invalid" {
		t.Errorf("an invalid report's span: trace %s events %v status %v attrs %v", s.TraceID, s.Events, s.Status, s.Attrs)
	}
	publishReport(t, ns, "rejected-7", opsReport(up, 7), nil)
	s = spanOf(t, rcv, "process tracking.reports", "messaging.message.id", "rejected-7")
	if !slices.Contains(s.Events, "dead_lettered") || s.Status != tracepb.Status_STATUS_CODE_ERROR ||
		s.Attrs["bridge.report.outcome"] != "rejected" || s.Attrs["bridge.upstream.status_code"] != int64(422) {
		t.Errorf("a rejected report's span: events %v status %v attrs %v", s.Events, s.Status, s.Attrs)
	}

	publishReport(t, ns, "redelivered-9", opsReport(up, 9), map[string]string{"traceparent": callerTP})
	testutil.Eventually(t, 20*time.Second, "both deliveries' spans of redelivered-9", func() bool {
		return len(rcv.Find(func(s testutil.ReceivedSpan) bool { return s.Attrs["messaging.message.id"] == "redelivered-9" })) == 2
	})
	for _, s := range rcv.Find(func(s testutil.ReceivedSpan) bool { return s.Attrs["messaging.message.id"] == "redelivered-9" }) {
		if s.TraceID != callerTrace || s.Parent != callerSpan {
			t.Errorf("a redelivered report's span: trace %s parent %s, want the caller's", s.TraceID, s.Parent)
		}
		switch s.Attrs["messaging.nats.delivery_count"] {
		case int64(1):
			if d, _ := s.Attrs["bridge.report.retry_delay_s"].(float64); !slices.Contains(s.Events, "redelivery") || d <= 0 ||
				s.Attrs["bridge.report.outcome"] != "retry" || s.Attrs["bridge.upstream.status_code"] != int64(503) {
				t.Errorf("the first delivery's span: events %v attrs %v", s.Events, s.Attrs)
			}
		case int64(2):
			if !slices.Contains(s.Events, "acknowledged") {
				t.Errorf("the second delivery's span: events %v attrs %v", s.Events, s.Attrs)
			}
		default:
			t.Errorf("a span of redelivered-9 with delivery count %v", s.Attrs["messaging.nats.delivery_count"])
		}
	}

	for i, tp := range hostileTraceparents {
		id := fmt.Sprintf("hostile-%d", i)
		publishReport(t, ns, id, opsReport(up, 10+i), map[string]string{"traceparent": tp,
			"tracestate": strings.Repeat("k=v,", 3000)})
		s = spanOf(t, rcv, "process tracking.reports", "messaging.message.id", id)
		if s.Parent != "" || s.TraceID == callerTrace {
			t.Errorf("a report with a hostile traceparent: span trace %s parent %q, want a trace of its own", s.TraceID, s.Parent)
		}
	}
	noHostileValue(t, rcv, fmt.Sprint(up.Traceparents()))
}

// TestAPITraces: an API request with a traceparent is a server span of the caller's trace, its parent the
// caller's span, with the RPC attributes and the code answered; the upstream call is a client span inside
// it and the upstream's request carries the trace; a refused request's span has status error and the
// refusal's kind, and no byte of its body; a hostile traceparent is ignored, and never echoed in a span or
// the reply.
func TestAPITraces(t *testing.T) {
	t.Parallel()
	rcv, ns, up, _ := tracedBridge(t)
	nc := ns.Connect()
	request := func(subject string, body []byte, tp string) *nats.Msg {
		t.Helper()
		var reply *nats.Msg
		testutil.EventuallyState(t, 10*time.Second, "an answer on "+subject, func() (bool, string) {
			m := nats.NewMsg(subject)
			m.Data = body
			if tp != "" {
				m.Header["traceparent"] = []string{tp}
			}
			r, err := nc.RequestMsg(m, testutil.Scale(5*time.Second))
			if err != nil {
				return false, err.Error()
			}
			reply = r
			return true, ""
		})
		return reply
	}

	request("tracking.api.orders.list", nil, callerTP)
	s := spanOf(t, rcv, "tracking.api.orders.list", "rpc.method", "orders.list")
	if s.TraceID != callerTrace || s.Parent != callerSpan || s.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("API span: trace %s parent %s kind %v; want trace %s parent %s, server", s.TraceID, s.Parent, s.Kind, callerTrace, callerSpan)
	}
	if s.Attrs["rpc.system.name"] != "nats" || s.Attrs["rpc.response.status_code"] != "200" || s.Status == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("API span attributes %v status %v", s.Attrs, s.Status)
	}
	get := childOf(rcv, s.SpanID)
	if len(get) != 1 || get[0].Kind != tracepb.Span_SPAN_KIND_CLIENT || !strings.HasPrefix(get[0].Name, "GET") {
		t.Errorf("the API span's children %+v: want one client span of the upstream GET", get)
	}
	carried := false
	for p := range up.Traceparents() {
		carried = carried || upstreamCarries(up, p, callerTrace)
	}
	if !carried {
		t.Errorf("the upstream's API requests carried %v, none of trace %s", up.Traceparents(), callerTrace)
	}

	const secret = "BODY-SECRET-4711"
	r := request("tracking.api.orders.get", []byte(`{"nope":"`+secret+`"}`), callerTP)
	if r.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Fatalf("a bad request answered %q", r.Header.Get("Nats-Service-Error-Code"))
	}
	s = spanOf(t, rcv, "tracking.api.orders.get", "rpc.method", "orders.get")
	if s.TraceID != callerTrace || s.Status != tracepb.Status_STATUS_CODE_ERROR || s.Attrs["bridge.api.refusal"] != "the request is invalid" ||
		s.Attrs["rpc.response.status_code"] != "400" {
		t.Errorf("a refused request's span: trace %s status %v attrs %v", s.TraceID, s.Status, s.Attrs)
	}
	if all := fmt.Sprintf("%+v", rcv.Spans()); strings.Contains(all, secret) || strings.Contains(all, "nope") {
		t.Errorf("a span holds the refused request's body")
	}

	for _, tp := range hostileTraceparents {
		r := request("tracking.api.locations.search", []byte(`{}`), tp)
		if strings.Contains(string(r.Data), hostileMark) || strings.Contains(fmt.Sprint(r.Header), hostileMark) {
			t.Errorf("the reply echoes a hostile traceparent")
		}
	}
	testutil.Eventually(t, 15*time.Second, "both hostile requests' spans", func() bool {
		return len(rcv.Find(func(s testutil.ReceivedSpan) bool { return s.Name == "tracking.api.locations.search" })) == 2
	})
	for _, s := range rcv.Find(func(s testutil.ReceivedSpan) bool { return s.Name == "tracking.api.locations.search" }) {
		if s.Parent != "" || s.TraceID == callerTrace {
			t.Errorf("a request with a hostile traceparent: span trace %s parent %q, want a trace of its own", s.TraceID, s.Parent)
		}
	}
	noHostileValue(t, rcv)

	// A request whose reply subject is no caller's inbox is dropped, and makes no span: a flood of them
	// with sampled traceparents costs the trace queue nothing. A request answered after it on the same
	// endpoint (one subscription, handled in order) shows that its span would have come by then.
	const droppedTrace = "0af7651916cd43dd8448eb211c80319c"
	dropped := nats.NewMsg("tracking.api.orders.list")
	dropped.Reply = "not.an.inbox"
	dropped.Header["traceparent"] = []string{"00-" + droppedTrace + "-b7ad6b7169203331-01"}
	if err := nc.PublishMsg(dropped); err != nil {
		t.Fatal(err)
	}
	const afterTrace = "1bf8762a27de54ee9559fc322d91420d"
	request("tracking.api.orders.list", nil, "00-"+afterTrace+"-b7ad6b7169203331-01")
	testutil.Eventually(t, 15*time.Second, "the span of the request answered after the dropped one", func() bool {
		return len(rcv.Find(func(s testutil.ReceivedSpan) bool { return s.TraceID == afterTrace })) > 0
	})
	if got := rcv.Find(func(s testutil.ReceivedSpan) bool { return s.TraceID == droppedTrace }); len(got) > 0 {
		t.Errorf("a request dropped for its reply subject made spans %+v", got)
	}
}

// tracedBridge runs a bridge against the simulator, without the units view, that sends every span to a
// real OTLP/HTTP collector; it returns the collector, the NATS server, the simulator and the bridge's
// configuration.
func tracedBridge(t *testing.T) (*testutil.OTLPReceiver, *testutil.NATS, *simtest.Upstream, *config.Config) {
	t.Helper()
	rcv := testutil.NewOTLPReceiver(t)
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	cfg := up.Config(ns.URL(), noUnitsView)
	opsStartBridgeWith(t, cfg, nil, tracingTo(rcv, "parentbased_always_on", 1))
	return rcv, ns, up, cfg
}
