package publish

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// TestEventSpans: every event sent gets one producer span, ended at its acknowledgement, whose context
// its message carries (in lower case); a duplicate's span says so; a dead letter's span names P.dlq.events
// and why; a span links to the span in Handle's context (the stream connection's). Once acknowledged, no
// acknowledgement slot keeps an ended span.
func TestEventSpans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	ctx, p, rec, tp := tracedPublisher(t, e, sdktrace.ParentBased(sdktrace.AlwaysSample()), 16, 2*time.Second)
	connCtx, conn := tp.Tracer("test").Start(ctx, "stream connection")
	bad := upstream.Event{ID: "bad", ResumeID: "bad", Name: "GATE_IN", Data: []byte(`[1]`)}
	for _, in := range []upstream.Event{ev("a", "GATE_IN"), ev("a", "GATE_IN"), bad} {
		if err := p.Handle(connCtx, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	conn.End()
	for i := range p.acks.slots {
		if p.acks.slots[i].span != nil {
			t.Errorf("acknowledgement slot %d still holds a span", i)
		}
	}

	var sends []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() != "stream connection" {
			sends = append(sends, s)
		}
	}
	if len(sends) != 3 {
		t.Fatalf("%d spans ended, want 3", len(sends))
	}
	stored := e.messages(e.layout.Events())
	dlq := e.messages(e.layout.DLQ())
	if len(stored) != 1 || len(dlq) != 1 {
		t.Fatalf("%d events stored and %d dead letters, want 1 and 1", len(stored), len(dlq))
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			m[kv.Key] = kv.Value
		}
		return m
	}
	events := func(s sdktrace.ReadOnlySpan) []string {
		var out []string
		for _, e := range s.Events() {
			out = append(out, e.Name)
		}
		return out
	}
	for i, s := range sends {
		if s.SpanKind() != trace.SpanKindProducer || s.Parent().IsValid() {
			t.Errorf("span %d: kind %v, parent %v; want a producer span starting its own trace", i, s.SpanKind(), s.Parent())
		}
		if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != conn.SpanContext().SpanID() {
			t.Errorf("span %d: links %v, want the connection's", i, l)
		}
	}
	var first, dup, dead sdktrace.ReadOnlySpan // the acknowledgements of two streams come in any order
	for _, s := range sends {
		switch {
		case attrs(s)["messaging.message.id"].AsString() == "bad":
			dead = s
		case slices.Contains(events(s), spanDuplicate):
			dup = s
		default:
			first = s
		}
	}
	if first == nil || dup == nil || dead == nil {
		t.Fatalf("spans: first %v, duplicate %v, dead letter %v", first != nil, dup != nil, dead != nil)
	}
	if got := carrier.SpanContext(stored[0].Header); got.SpanID() != first.SpanContext().SpanID() {
		t.Errorf("the stored event names span %v, want %v", got.SpanID(), first.SpanContext().SpanID())
	}
	if a := attrs(first); first.Name() != "send tracking.events.{type}.{unit}" ||
		a["messaging.destination.name"].AsString() != stored[0].Subject || a["messaging.nats.stream.sequence"].AsInt64() != int64(stored[0].Sequence) ||
		a["messaging.message.id"].AsString() != "a" || a["messaging.system"].AsString() != "nats" {
		t.Errorf("first span %q %v", first.Name(), a)
	}
	if a := attrs(dup); a["messaging.message.id"].AsString() != "a" {
		t.Errorf("the duplicate's span %v", a)
	}
	if a := attrs(dead); dead.Name() != "send tracking.dlq.events" || !slices.Contains(events(dead), spanDeadLettered) ||
		dead.Status().Code != codes.Error || a["messaging.destination.name"].AsString() != "tracking.dlq.events" {
		t.Errorf("dead letter's span %q %v events %v status %v", dead.Name(), a, events(dead), dead.Status())
	}
	if got := carrier.SpanContext(dlq[0].Header); got.SpanID() != dead.SpanContext().SpanID() {
		t.Errorf("the dead letter names span %v, want %v", got.SpanID(), dead.SpanContext().SpanID())
	}
}

// TestAbandonedSpans: the spans of events still unacknowledged when the publisher closes (its term
// ends, NATS unreachable) end, saying so, rather than never.
func TestAbandonedSpans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	px := testutil.StartProxy(t, e.ns.URL())
	nc, err := nats.Connect(px.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(tracing.IDs{}))
	p, err := New(nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), DLQStream: e.layout.DLQ(),
		Window: 16, Timeout: time.Minute, Logger: discard(), Spans: sends(tp)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	px.Freeze() // the messages leave; no acknowledgement comes back
	for _, id := range []string{"a", "b", "c"} {
		if err := p.Handle(ctx, ev(id, "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans ended before any acknowledgement", n)
	}
	p.Close()
	ended := rec.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans ended at Close, want the 3 unacknowledged", len(ended))
	}
	for _, s := range ended {
		var names []string
		for _, ev := range s.Events() {
			names = append(names, ev.Name)
		}
		if !slices.Contains(names, spanAbandoned) {
			t.Errorf("span %s: events %v, want %s", s.Name(), names, spanAbandoned)
		}
	}
}

// sends returns the event spans of tp, which samples every root.
func sends(tp *sdktrace.TracerProvider) *tracing.Roots {
	return tracing.NewRoots(tp.Tracer("test"), sdktrace.ParentBased(sdktrace.AlwaysSample()), "send", trace.SpanKindProducer)
}

// TestUnsampledEventSpans: with a sampler that keeps about half the traces, every event's message carries
// a whole traceparent of a trace of its own; those whose flags say sampled name a span the SDK recorded
// and ended, the others no span at all, and the sampler's ratio decides by the trace id the message names.
func TestUnsampledEventSpans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	sampler := sdktrace.TraceIDRatioBased(0.5)
	ctx, p, rec, _ := tracedPublisher(t, e, sampler, 64, 10*time.Second)
	const n = 400
	for i := range n {
		if err := p.Handle(ctx, ev(fmt.Sprint("e", i), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	recorded := map[trace.SpanID]trace.TraceID{}
	for _, s := range rec.Ended() {
		recorded[s.SpanContext().SpanID()] = s.SpanContext().TraceID()
	}
	stored := e.messages(e.layout.Events())
	if len(stored) != n {
		t.Fatalf("%d events stored, want %d", len(stored), n)
	}
	traces := map[trace.TraceID]bool{}
	sampled := 0
	for _, m := range stored {
		sc := carrier.SpanContext(m.Header)
		if !sc.IsValid() {
			t.Fatalf("event %s: traceparent %q", m.Header.Get(nats.MsgIdHdr), m.Header.Get(carrier.Traceparent))
		}
		if traces[sc.TraceID()] {
			t.Errorf("trace %v named by two events", sc.TraceID())
		}
		traces[sc.TraceID()] = true
		want := sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: sc.TraceID()}).Decision
		if sc.IsSampled() != (want == sdktrace.RecordAndSample) {
			t.Errorf("event %s: sampled %v, the ratio says %v", m.Header.Get(nats.MsgIdHdr), sc.IsSampled(), want)
		}
		tid, ok := recorded[sc.SpanID()]
		switch {
		case sc.IsSampled() && (!ok || tid != sc.TraceID()):
			t.Errorf("sampled event %s names span %v of trace %v, which was not recorded", m.Header.Get(nats.MsgIdHdr), sc.SpanID(), sc.TraceID())
		case !sc.IsSampled() && ok:
			t.Errorf("unsampled event %s names a recorded span", m.Header.Get(nats.MsgIdHdr))
		}
		if sc.IsSampled() {
			sampled++
		}
	}
	// 400 draws at one half: 120 to 280 lies more than 8 standard deviations (10) either side.
	if sampled < 120 || sampled > 280 || len(recorded) != sampled {
		t.Errorf("%d of %d events sampled, %d spans recorded", sampled, n, len(recorded))
	}
}

// tracedPublisher returns a publisher on e whose event spans tp records in rec, sampled by sampler,
// resumed, and a context for the test's calls; both end with the test.
func tracedPublisher(t *testing.T, e *testEnv, sampler sdktrace.Sampler, window int, timeout time.Duration) (
	context.Context, *Publisher, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler),
		sdktrace.WithIDGenerator(tracing.IDs{}))
	p, err := New(e.nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), DLQStream: e.layout.DLQ(),
		Window: window, Timeout: timeout, Logger: discard(),
		Spans: tracing.NewRoots(tp.Tracer("test"), sampler, "send", trace.SpanKindProducer)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	t.Cleanup(cancel)
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, p, rec, tp
}
