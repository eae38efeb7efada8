package tracing

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/config"
	tu "github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func newProvider(t *testing.T, url, sampler string, ratio float64) *Provider {
	t.Helper()
	p, err := New(context.Background(), config.Tracing{Enabled: true, TracesURL: url, ServiceName: "bridge-test",
		Sampler: sampler, Ratio: ratio, Timeout: time.Second}, prometheus.NewRegistry(), nil, "v-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

// TestOff: with tracing off the provider has no tracer, and its series exist at zero.
func TestOff(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := New(context.Background(), config.Tracing{}, reg, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled() || p.Tracer("x") != nil {
		t.Fatal("tracing on without an endpoint")
	}
	if n := testutil.CollectAndCount(reg, "bridge_trace_spans_dropped_total"); n != 2 {
		t.Errorf("%d dropped series, want 2", n)
	}
}

// TestExport: a span reaches an OTLP/HTTP collector with the service's resource.
func TestExport(t *testing.T) {
	rcv := tu.NewOTLPReceiver(t)
	p := newProvider(t, rcv.URL, "parentbased_always_on", 1)
	_, span := p.Tracer("test").Start(context.Background(), "work")
	span.End()
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := rcv.Find(func(s tu.ReceivedSpan) bool { return s.Name == "work" })
	if len(got) != 1 {
		t.Fatalf("received %+v", rcv.Spans())
	}
	if got[0].Resource["service.name"] != "bridge-test" || got[0].Resource["service.version"] != "v-test" {
		t.Errorf("resource %v", got[0].Resource)
	}
	if v := testutil.ToFloat64(p.exported); v != 1 {
		t.Errorf("exported %v", v)
	}
}

// TestSampling: the ratio samplers sample nothing at 0 and everything at 1; the parent-based ones follow
// a remote parent's sampled flag whatever the ratio.
func TestSampling(t *testing.T) {
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1},
		TraceFlags: trace.FlagsSampled, Remote: true})
	notSampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{2}, Remote: true})
	for _, tc := range []struct {
		sampler string
		ratio   float64
		parent  trace.SpanContext
		want    bool
	}{
		{"traceidratio", 0, trace.SpanContext{}, false},
		{"traceidratio", 1, trace.SpanContext{}, true},
		{"traceidratio", 0, sampled, false}, // not parent-based: the ratio decides
		{"parentbased_traceidratio", 0, trace.SpanContext{}, false},
		{"parentbased_traceidratio", 0, sampled, true},
		{"parentbased_traceidratio", 1, notSampled, false},
		{"parentbased_always_off", 1, sampled, true},
		{"parentbased_always_on", 1, notSampled, false},
		{"always_off", 1, sampled, false},
		{"always_on", 0, notSampled, true},
	} {
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), tc.parent)
		// Every sampler here decides the same way each time (a ratio of 0 or 1): one span tells.
		_, span := newTestTracer(Sampler(tc.sampler, tc.ratio)).Start(ctx, "x")
		if got := span.SpanContext().IsSampled(); got != tc.want {
			t.Errorf("%s %v parent sampled=%v: sampled %v, want %v", tc.sampler, tc.ratio, tc.parent.IsSampled(), got, tc.want)
		}
	}
}

// TestCollectorDown: spans ended while the collector is down or hangs never wait: Start and End return
// at once, the queue stays bounded, and what is not exported is counted as dropped.
func TestCollectorDown(t *testing.T) {
	rcv := tu.NewOTLPReceiver(t)
	rcv.Block()
	p := newProvider(t, rcv.URL, "always_on", 1)
	tr := p.Tracer("test")
	start := time.Now()
	const n = 3 * QueueSize
	for range n {
		_, span := tr.Start(context.Background(), "e")
		span.End()
	}
	if d := time.Since(start); d > tu.Scale(2*time.Second) {
		t.Errorf("%d spans took %v with the collector hanging", n, d)
	}
	dropped := p.dropped.WithLabelValues(DropQueueFull)
	if v := testutil.ToFloat64(dropped); v < n-QueueSize-BatchSize {
		t.Errorf("dropped %v of %d with a queue of %d", v, n, QueueSize)
	}
	// The collector goes away: the exports in flight fail, and their spans count as dropped.
	rcv.Close()
	tu.Eventually(t, 10*time.Second, "a failed export is counted", func() bool {
		return testutil.ToFloat64(p.dropped.WithLabelValues(DropExportFailed)) > 0
	})
}
