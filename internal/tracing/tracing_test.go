package tracing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel"
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
	if err := p.Shutdown(context.Background()); err != nil { // exports what is queued
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

// TestCollectorDown: spans ended while the collector hangs or is down never wait: Start and End return
// at once, the queue stays bounded, and every span not exported is counted as dropped: those that found
// the queue full, those of exports that timed out, and, once the collector is gone, those of exports that
// could not connect.
func TestCollectorDown(t *testing.T) {
	rcv := tu.NewOTLPReceiver(t)
	rcv.Block()
	p := newProvider(t, rcv.URL, "always_on", 1)
	exportErrs := &errorCatcher{}
	otel.SetErrorHandler(exportErrs) // in place of the bridge's log, which New set
	tr := p.Tracer("test")
	queueFull := p.dropped.WithLabelValues(DropQueueFull)
	failed := p.dropped.WithLabelValues(DropExportFailed)
	spans := func(n int) {
		for range n {
			_, span := tr.Start(context.Background(), "e")
			span.End()
		}
	}
	start := time.Now()
	const n = 3 * QueueSize
	spans(n)
	if d := time.Since(start); d > tu.Scale(2*time.Second) {
		t.Errorf("%d spans took %v with the collector hanging", n, d)
	}
	// Each span is dropped with the queue full, queued (at most QueueSize), in the one export under way
	// (at most BatchSize), or in an export that ended: that holds however long the loop took, during which
	// exports may have timed out and made room.
	dropped := testutil.ToFloat64(queueFull)
	if ended := testutil.ToFloat64(failed) + testutil.ToFloat64(p.exported); dropped < n-QueueSize-BatchSize-ended {
		t.Errorf("dropped %v of %d with a queue of %d and %v spans in exports that ended", dropped, n, QueueSize, ended)
	}
	if dropped == 0 {
		t.Error("no span dropped with the queue full")
	}

	// The collector goes away (the export it held goes through first): the queued spans' exports fail.
	rcv.Close()
	count := func() float64 {
		return testutil.ToFloat64(queueFull) + testutil.ToFloat64(failed) + testutil.ToFloat64(p.exported)
	}
	tu.EventuallyState(t, 30*time.Second, "every span exported or counted as dropped", func() (bool, string) {
		return count() == n, fmt.Sprintf("%v of %d", count(), n)
	})
	// Spans made now cannot reach it: their exports fail to connect, and they are counted.
	before := testutil.ToFloat64(failed)
	start = time.Now()
	spans(BatchSize)
	if d := time.Since(start); d > tu.Scale(2*time.Second) {
		t.Errorf("%d spans took %v with the collector down", BatchSize, d)
	}
	tu.EventuallyState(t, 15*time.Second, "the spans made with the collector down counted as failed", func() (bool, string) {
		got := testutil.ToFloat64(failed) - before
		return got == BatchSize, fmt.Sprintf("%v of %d", got, BatchSize)
	})
	// They failed because nothing answers any more (a collector that hangs fails exports by their
	// timeout instead): the SDK hands the exporter's error on.
	if !exportErrs.refused() {
		t.Errorf("no export refused a connection; the exporters' errors: %v", exportErrs.all())
	}
}

// errorCatcher keeps the errors the SDK reports (a failed export's among them).
type errorCatcher struct {
	mu   sync.Mutex
	errs []error
}

func (c *errorCatcher) Handle(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

func (c *errorCatcher) all() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.errs)
}

// refused reports whether an error was a refused connection.
func (c *errorCatcher) refused() bool {
	return slices.ContainsFunc(c.all(), func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) })
}
