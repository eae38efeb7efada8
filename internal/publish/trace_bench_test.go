package publish

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
)

// BenchmarkPublisherTraced measures the unfenced publisher of BenchmarkPublisherFence with tracing off,
// and on at ratios 0.01 and 1 exporting to an OTLP/HTTP collector in the same process (its decoding
// included). With tracing on, Handle's context holds a connection's span, as the stream's does in the
// bridge, sampled by the same ratio. Figures go to docs/performance.md#tracing; run: go test -run '^$' -bench PublisherTraced
// -benchmem -benchtime 20000x ./internal/publish/
func BenchmarkPublisherTraced(b *testing.B) {
	nc := testutil.StartNATS(b, nil).Connect()
	js, _ := jetstream.New(nc)
	rcv := testutil.NewOTLPReceiver(b)
	for run, mode := range []struct {
		name  string
		ratio float64
	}{{"off", 0}, {"ratio-0.01", 0.01}, {"ratio-1", 1}} {
		b.Run(mode.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			layout := layout.Streams{Prefix: fmt.Sprintf("t%d", run), DuplicateWindow: time.Minute}
			if err := layout.Ensure(ctx, js, true, discard()); err != nil {
				b.Fatal(err)
			}
			cfg := Config{Prefix: layout.Prefix, EventsStream: layout.Events(), DLQStream: layout.DLQ(),
				Window: 1024, Timeout: 10 * time.Second, Logger: discard()}
			var tp *tracing.Provider
			if mode.name != "off" {
				var err error
				tp, err = tracing.New(ctx, config.Tracing{Enabled: true, TracesURL: rcv.URL, ServiceName: "bench",
					Sampler: "traceidratio", Ratio: mode.ratio, Timeout: 10 * time.Second}, nil, nil, "")
				if err != nil {
					b.Fatal(err)
				}
				defer tp.Shutdown(context.Background())
				cfg.Spans = tp.Roots("bench", "send", trace.SpanKindProducer)
				var conn trace.Span
				ctx, conn = tp.Tracer("bench").Start(ctx, "stream connection")
				defer conn.End()
			}
			p, err := New(nc, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			if _, err := p.Resume(ctx); err != nil {
				b.Fatal(err)
			}
			benchHandle(ctx, b, p, b.N)
		})
	}
}
