package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
)

// Tracing through a whole bridge, against a real OTLP/HTTP collector (testutil.OTLPReceiver).

// tracingTo is the tracing configuration of a bridge exporting to rcv.
func tracingTo(rcv *testutil.OTLPReceiver, sampler string, ratio float64) Option {
	return WithTracing(config.Tracing{Enabled: true, TracesURL: rcv.URL, ServiceName: config.DefaultServiceName,
		Sampler: sampler, Ratio: ratio, Timeout: time.Second})
}

// noUnitsView leaves the units view out, which these tests do not need.
func noUnitsView(c *config.Config) { c.UnitsView = false }

// injectUnits injects n GATE_IN events of distinct loading units, each with a timestamp.
func injectUnits(s *sim.Server, from, n int) {
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("tr-%04d", i)
		s.Inject("demo", id, "GATE_IN", fmt.Appendf(nil, `{"id":%q,"type":"GATE_IN","timestamp":%q,`+
			`"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"MSKU%07d"}}}}`,
			id, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano), i))
	}
}

// TestEventTraces: every event stored carries a lower-case traceparent naming a producer span the
// collector received, with the messaging conventions' attributes and the event's stream sequence,
// linked to the span of the stream's connection; the token request and the stream's request are client
// spans of their own; no span holds the password or a token; the acknowledgement latency's exemplars are
// the events' trace ids, and every event's freshness is measured.
func TestEventTraces(t *testing.T) {
	t.Parallel()
	const n = 20
	const password = "trace-Pa55word"
	rcv := testutil.NewOTLPReceiver(t)
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{Users: map[string]string{"demo": password}})
	injectUnits(up.Sim(), 0, n)
	cfg := up.Config(ns.URL(), noUnitsView, func(c *config.Config) { c.Password = password })
	ob := opsStartBridgeWith(t, cfg, nil, tracingTo(rcv, "parentbased_always_on", 1))
	testutil.EventuallyState(t, 15*time.Second, "the events stored", func() (bool, string) {
		got := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return got >= n, fmt.Sprintf("%d stored", got)
	})
	js, _ := jetstream.New(ns.Connect())
	msgs := testutil.StreamContents(t, js, "TRACKING_EVENTS")
	if len(msgs) != n {
		t.Fatalf("%d events stored, want %d", len(msgs), n)
	}
	// The acknowledgements are taken after the events are stored: wait for the last one's freshness, which
	// is measured after its latency's exemplar, then read the exemplars.
	testutil.EventuallyState(t, 15*time.Second, "every event's freshness measured", func() (bool, string) {
		got := ob.counter(t, "bridge_event_freshness_seconds", nil)
		return got == n, fmt.Sprintf("%v measured, want %d", got, n)
	})
	_, metricsPage := testutil.Scrape(t, "http://"+ob.addr+"/metrics", "application/openmetrics-text; version=1.0.0")
	// The stream's connection span ends with the connection: stop the bridge, which exports it.
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "every event's span received", func() bool {
		spans := rcv.BySpanID()
		for _, m := range msgs {
			if _, ok := spans[carrier.SpanContext(m.Header).SpanID().String()]; !ok {
				return false
			}
		}
		return true
	})
	spans := rcv.BySpanID()
	var exemplar bool
	for _, m := range msgs {
		if _, ok := m.Header["Traceparent"]; ok {
			t.Errorf("%s carries a canonical-case Traceparent", m.Subject)
		}
		sc := carrier.SpanContext(m.Header)
		if !sc.IsValid() || !sc.IsSampled() {
			t.Fatalf("%s: traceparent %q", m.Subject, m.Header["traceparent"])
		}
		s := spans[sc.SpanID().String()]
		want := map[string]any{
			"messaging.system": "nats", "messaging.destination.name": m.Subject,
			"messaging.destination.template": "tracking.events.{type}.{unit}", "messaging.operation.type": "send",
			"messaging.message.id": m.Header.Get("Nats-Msg-Id"), "messaging.message.body.size": int64(len(m.Data)),
			"messaging.nats.stream.sequence": int64(m.Sequence),
		}
		for k, v := range want {
			if s.Attrs[k] != v {
				t.Errorf("%s: span attribute %s = %v, want %v", m.Subject, k, s.Attrs[k], v)
			}
		}
		if s.Name != "send tracking.events.{type}.{unit}" || s.Kind != tracepb.Span_SPAN_KIND_PRODUCER || s.TraceID != sc.TraceID().String() {
			t.Errorf("%s: span %q kind %v trace %s", m.Subject, s.Name, s.Kind, s.TraceID)
		}
		if len(s.Links) != 1 {
			t.Errorf("%s: links %v, want the stream connection's", m.Subject, s.Links)
		} else if conn, ok := spans[strings.Split(s.Links[0], "/")[1]]; !ok || conn.Name != "stream connection" {
			t.Errorf("%s: linked to %+v", m.Subject, conn)
		}
		exemplar = exemplar || strings.Contains(metricsPage, `trace_id="`+sc.TraceID().String()+`"`)
	}
	if !exemplar {
		t.Errorf("no exemplar of bridge_publish_ack_seconds names an event's trace:\n%s", grepLines(metricsPage, "bridge_publish_ack_seconds"))
	}

	token := rcv.Find(func(s testutil.ReceivedSpan) bool { return s.Name == "POST /auth/token" })
	if len(token) == 0 || token[0].Kind != tracepb.Span_SPAN_KIND_CLIENT || token[0].Attrs["http.response.status_code"] != int64(200) {
		t.Errorf("token request spans %+v", token)
	}
	get := rcv.Find(func(s testutil.ReceivedSpan) bool { return strings.HasPrefix(s.Name, "GET ") })
	if len(get) == 0 || get[0].Attrs["http.response.status_code"] != int64(200) {
		t.Errorf("stream request spans %+v", get)
	} else if conn, ok := spans[get[0].Parent]; !ok || conn.Name != "stream connection" {
		t.Errorf("the stream's request is not a child of its connection's span: parent %+v", conn)
	}
	all := fmt.Sprintf("%+v", rcv.Spans())
	testutil.NoSecrets(t, all, append([]string{password}, up.IssuedTokens()...)...)
	if strings.Contains(strings.ToLower(all), "authorization") || strings.Contains(all, "Bearer") {
		t.Errorf("a span holds an Authorization header")
	}
}

// TestEventTracesSampling: at ratio 0 every event still carries its trace context, not sampled, and the
// collector receives no event span; at ratio 1 it receives every one.
func TestEventTracesSampling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sampler string
		ratio   float64
		sampled bool
	}{{"traceidratio", 0, false}, {"parentbased_traceidratio", 0, false}, {"traceidratio", 1, true}} {
		t.Run(fmt.Sprintf("%s=%v", tc.sampler, tc.ratio), func(t *testing.T) {
			t.Parallel()
			const n = 10
			rcv := testutil.NewOTLPReceiver(t)
			ns := testutil.StartNATS(t, nil)
			up := simtest.Start(t, false, sim.Options{})
			injectUnits(up.Sim(), 0, n)
			ob := opsStartBridgeWith(t, up.Config(ns.URL(), noUnitsView), nil, tracingTo(rcv, tc.sampler, tc.ratio))
			testutil.Eventually(t, 15*time.Second, "the events stored", func() bool {
				return opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS") >= n
			})
			if err := ob.stop(t); err != nil { // exports what is queued
				t.Fatal(err)
			}
			js, _ := jetstream.New(ns.Connect())
			msgs := testutil.StreamContents(t, js, "TRACKING_EVENTS")
			spans := rcv.BySpanID()
			for _, m := range msgs {
				sc := carrier.SpanContext(m.Header)
				if !sc.IsValid() || sc.IsSampled() != tc.sampled {
					t.Errorf("%s: traceparent %q", m.Subject, m.Header["traceparent"])
				}
				if _, got := spans[sc.SpanID().String()]; got != tc.sampled {
					t.Errorf("%s: span received %v, want %v", m.Subject, got, tc.sampled)
				}
			}
		})
	}
}

// TestEventsFlowWithCollectorDown: a collector that hangs and then goes away never stops or slows the
// events: they are all stored, and the spans the bounded queue could not hold, or the collector did not
// take, are counted as dropped.
func TestEventsFlowWithCollectorDown(t *testing.T) {
	t.Parallel()
	const n = 3 * tracing.QueueSize
	rcv := testutil.NewOTLPReceiver(t)
	rcv.Block()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridgeWith(t, up.Config(ns.URL(), noUnitsView), nil, tracingTo(rcv, "always_on", 1))
	injectUnits(up.Sim(), 0, n)
	testutil.EventuallyState(t, 60*time.Second, "every event stored with the collector hanging", func() (bool, string) {
		got := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return got >= n, fmt.Sprintf("%d stored", got)
	})
	if got := ob.counter(t, "bridge_trace_spans_dropped_total", map[string]string{"reason": tracing.DropQueueFull}); got == 0 {
		t.Error("no span counted as dropped with the queue full")
	}
	testutil.Eventually(t, 15*time.Second, "an export that timed out counted", func() bool {
		return ob.counter(t, "bridge_trace_spans_dropped_total", map[string]string{"reason": tracing.DropExportFailed}) > 0
	})
	rcv.Close() // the collector goes away: events keep flowing
	injectUnits(up.Sim(), n, 100)
	testutil.Eventually(t, 15*time.Second, "events stored with the collector down", func() bool {
		return opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS") >= n+100
	})
	start := time.Now()
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > testutil.Scale(10*time.Second) {
		t.Errorf("stopping took %v with the collector down", d)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
