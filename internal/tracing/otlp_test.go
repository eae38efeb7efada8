package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// testSpans are spans of every shape the encoder writes: two resources, scopes with and without a version
// and attributes, every attribute type, events, links with and without trace state, remote and local
// parents, each span kind and status.
func testSpans() []sdktrace.ReadOnlySpan {
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "bridge"), attribute.String("service.version", "v1"))
	other := resource.NewSchemaless(attribute.String("service.name", "other"))
	scopeA := instrumentation.Scope{Name: "a", Version: "1.0", SchemaURL: "https://example.com/s"}
	scopeB := instrumentation.Scope{Name: "b", Attributes: attribute.NewSet(attribute.Bool("x", true))}
	ts, _ := trace.ParseTraceState("vendor=value,other=1")
	t0 := time.Unix(1_700_000_000, 123)
	long := make([]byte, 300) // a length of two bytes, nested in three
	for i := range long {
		long[i] = byte('a' + i%26)
	}
	attrs := []attribute.KeyValue{
		attribute.Bool("b", true), attribute.Bool("f", false), attribute.Int64("i", -7), attribute.Int64("zero", 0),
		attribute.Float64("x", 2.5), attribute.String("s", "text"), attribute.String("empty", ""),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, -2, 1 << 40}),
		attribute.Float64Slice("xs", []float64{0.5, -1}), attribute.StringSlice("ss", []string{"a", "", string(long)}),
		attribute.ByteSlice("bytes", long),
		attribute.Slice("mixed", attribute.StringValue("a"), attribute.IntValue(3)),
		attribute.Map("m", attribute.String("k", "v"), attribute.Int("n", 1)),
	}
	var stubs tracetest.SpanStubs
	for i, kind := range []trace.SpanKind{trace.SpanKindUnspecified, trace.SpanKindInternal, trace.SpanKindServer,
		trace.SpanKindClient, trace.SpanKindProducer, trace.SpanKindConsumer} {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i + 1), 2, 3},
			SpanID: trace.SpanID{byte(i + 1), 9}, TraceFlags: trace.FlagsSampled})
		s := tracetest.SpanStub{
			Name: "span " + string(rune('a'+i)), SpanContext: sc, SpanKind: kind,
			StartTime: t0, EndTime: t0.Add(time.Duration(i) * time.Millisecond),
			Resource: res, InstrumentationScope: scopeA,
		}
		switch i {
		case 0:
			s.Attributes = attrs
			s.Status = sdktrace.Status{Code: codes.Error, Description: "failed: " + string(long)}
			s.DroppedAttributes, s.DroppedEvents, s.DroppedLinks = 3, 4, 5
		case 1:
			s.SpanContext = sc.WithTraceState(ts)
			s.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: trace.SpanID{7},
				TraceFlags: trace.FlagsSampled, Remote: true})
			s.Events = []sdktrace.Event{
				{Name: "retry", Time: t0.Add(time.Microsecond), Attributes: attrs[:3], DroppedAttributeCount: 2},
				{Name: "bare", Time: t0},
			}
			s.Status = sdktrace.Status{Code: codes.Ok}
		case 2:
			s.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: trace.SpanID{8}})
			s.Links = []sdktrace.Link{
				{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{5}, SpanID: trace.SpanID{6},
					TraceFlags: trace.FlagsSampled, Remote: true, TraceState: ts}), Attributes: attrs[5:7],
					DroppedAttributeCount: 1},
				{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{5}, SpanID: trace.SpanID{7}})},
			}
		case 3:
			s.InstrumentationScope = scopeB
		case 4:
			s.Resource = other
			s.Attributes = attrs[5:6]
		case 5:
			s.Resource = other
			s.InstrumentationScope = scopeB
		}
		stubs = append(stubs, s)
	}
	return stubs.Snapshots()
}

// official returns the request the OpenTelemetry OTLP/HTTP exporter posts for spans, decoded.
func official(t testing.TB, spans []sdktrace.ReadOnlySpan) *coltrace.ExportTraceServiceRequest {
	t.Helper()
	var mu sync.Mutex
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		body = b
		mu.Unlock()
	}))
	defer srv.Close()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	_ = exp.Shutdown(context.Background())
	mu.Lock()
	defer mu.Unlock()
	return decode(t, body)
}

func decode(t testing.TB, b []byte) *coltrace.ExportTraceServiceRequest {
	t.Helper()
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	return &req
}

// normalize orders the resources by service name (the exporter takes them from a map) and gives every
// span the Status the exporter always writes, empty when the span's is unset.
func normalize(req *coltrace.ExportTraceServiceRequest) {
	name := func(rs *tracepb.ResourceSpans) string {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				return kv.Value.GetStringValue()
			}
		}
		return ""
	}
	if len(req.ResourceSpans) == 2 && name(req.ResourceSpans[0]) > name(req.ResourceSpans[1]) {
		req.ResourceSpans[0], req.ResourceSpans[1] = req.ResourceSpans[1], req.ResourceSpans[0]
	}
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if s.Status == nil {
					s.Status = &tracepb.Status{}
				}
			}
		}
	}
}

// TestEncoderMatchesExporter: the encoder's request decodes to what the OpenTelemetry exporter sends for
// the same spans, but for the links' trace state, which the exporter leaves out and OTLP has a field for.
func TestEncoderMatchesExporter(t *testing.T) {
	spans := testSpans()
	want := official(t, spans)
	var e encoder
	got := decode(t, e.request(spans))
	for _, rs := range got.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				for _, l := range s.Links {
					if l.SpanId[0] == 6 && l.TraceState != "vendor=value,other=1" {
						t.Errorf("link trace state %q", l.TraceState)
					}
					l.TraceState = ""
				}
			}
		}
	}
	normalize(want)
	normalize(got)
	if !proto.Equal(got, want) {
		t.Errorf("encoded request differs from the exporter's:\n got %v\nwant %v", got, want)
	}
	if len(got.ResourceSpans) != 2 || len(got.ResourceSpans[0].ScopeSpans) != 2 {
		t.Errorf("grouping: %v", got)
	}
	// The buffer is reused: a second, smaller request is not the first's tail.
	got2 := decode(t, e.request(spans[:1]))
	if n := len(got2.ResourceSpans); n != 1 || len(got2.ResourceSpans[0].ScopeSpans[0].Spans) != 1 {
		t.Errorf("second request: %v", got2)
	}
	if b := e.request(nil); len(b) != 0 {
		t.Errorf("no spans: %d bytes", len(b))
	}
}

// eventSpans are n spans shaped like the bridge's event spans, from one resource and scope.
func eventSpans(n int) []sdktrace.ReadOnlySpan {
	res := resource.NewSchemaless(attribute.String("service.name", "tracking-bridge"),
		attribute.String("service.version", "v1.2.3"), attribute.String("telemetry.sdk.language", "go"))
	scope := instrumentation.Scope{Name: "github.com/tracking-bridge/tracking-bridge/internal/publish"}
	t0 := time.Now()
	stubs := make(tracetest.SpanStubs, n)
	for i := range stubs {
		stubs[i] = tracetest.SpanStub{
			Name: "send tracking.events.{type}.{unit}",
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i), byte(i >> 8), 1},
				SpanID: trace.SpanID{byte(i), 2}, TraceFlags: trace.FlagsSampled}),
			SpanKind: trace.SpanKindProducer, StartTime: t0, EndTime: t0.Add(time.Millisecond),
			Attributes: []attribute.KeyValue{
				MessagingNATS, attribute.String("messaging.operation.name", "send"),
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", "tracking.events.GATE_IN.MSKU1234567"),
				attribute.String("messaging.destination.template", "tracking.events.{type}.{unit}"),
				attribute.String("messaging.message.id", "01J8ZK3V6X9Q2W4E5R6T7Y8U9I"),
				attribute.Int("messaging.message.body.size", 1000), attribute.Int64(string(KeyStreamSequence), int64(i)),
				attribute.Int(string(KeyRetries), 0), attribute.String(string(KeyEventType), "GATE_IN"),
			},
			Resource: res, InstrumentationScope: scope,
		}
	}
	return stubs.Snapshots()
}

// BenchmarkExportEncoding encodes a batch of 512 event spans: the encoder against the OpenTelemetry
// exporter's transform and marshal, which its ExportSpans runs before posting (measured here by posting
// to a loopback server that reads and drops the body; the encoder's figure has no HTTP in it).
func BenchmarkExportEncoding(b *testing.B) {
	spans := eventSpans(512)
	b.Run("encoder", func(b *testing.B) {
		var e encoder
		b.ReportAllocs()
		for b.Loop() {
			_ = e.request(spans)
		}
	})
	b.Run("otlptracehttp", func(b *testing.B) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		defer srv.Close()
		exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
		if err != nil {
			b.Fatal(err)
		}
		defer exp.Shutdown(context.Background())
		b.ReportAllocs()
		for b.Loop() {
			if err := exp.ExportSpans(context.Background(), spans); err != nil {
				b.Fatal(err)
			}
		}
	})
}
