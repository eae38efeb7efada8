package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	tu "github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestRoots: through a Provider at ratio 0.25, each root's span context is valid and of a trace of its
// own; the sampled ones are the ones the ratio keeps by that trace id, and exactly they reach the
// collector, as producer spans without a parent, under the same ids.
func TestRoots(t *testing.T) {
	rcv := tu.NewOTLPReceiver(t)
	p := newProvider(t, rcv.URL, "traceidratio", 0.25)
	roots := p.Roots("test", "send", trace.SpanKindProducer)
	ratio := sdktrace.TraceIDRatioBased(0.25)
	const n = 2000
	traces := map[trace.TraceID]bool{}
	var sampled []trace.SpanContext
	for range n {
		span, sc := roots.Start()
		recording := span.IsRecording()
		span.End()
		if !sc.IsValid() || traces[sc.TraceID()] {
			t.Fatalf("span context %v: invalid or of a trace seen before", sc)
		}
		traces[sc.TraceID()] = true
		keep := ratio.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(),
			TraceID: sc.TraceID()}).Decision == sdktrace.RecordAndSample
		if sc.IsSampled() != keep || recording != keep {
			t.Fatalf("trace %v: sampled %v, recording %v; the ratio keeps it: %v", sc.TraceID(), sc.IsSampled(),
				recording, keep)
		}
		if keep {
			if got := span.SpanContext(); !got.Equal(sc) {
				t.Fatalf("span %v, returned context %v", got, sc)
			}
			sampled = append(sampled, sc)
		}
	}
	// 2,000 draws at a quarter: 350 to 650 lies more than 7 standard deviations (19.4) either side.
	if len(sampled) < 350 || len(sampled) > 650 {
		t.Fatalf("%d of %d sampled at ratio 0.25", len(sampled), n)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := rcv.BySpanID()
	if len(got) != len(sampled) {
		t.Errorf("the collector received %d spans, %d were sampled", len(got), len(sampled))
	}
	for _, sc := range sampled {
		s, ok := got[sc.SpanID().String()]
		if !ok || s.TraceID != sc.TraceID().String() || s.Parent != "" || s.Name != "send" {
			t.Errorf("span %v: received %+v", sc, s)
		}
	}
}

// TestRootsDroppedAllocateNothing: a root the sampler drops costs no allocation.
func TestRootsDroppedAllocateNothing(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(IDs{}))
	roots := NewRoots(tp.Tracer("test"), sdktrace.NeverSample(), "send", trace.SpanKindProducer)
	if n := testing.AllocsPerRun(1000, func() {
		span, sc := roots.Start()
		if !sc.IsValid() || sc.IsSampled() {
			t.Fatalf("span context %v", sc)
		}
		span.End()
	}); n != 0 {
		t.Errorf("%v allocations per dropped root", n)
	}
}
