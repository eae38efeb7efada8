package publish

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// BenchmarkPublisherTraced measures the unfenced publisher of BenchmarkPublisherFence with tracing off,
// and on at ratios 0.01 and 1 exporting to an OTLP/HTTP collector in the same process (its decoding
// included). Figures go to docs/performance.md#tracing; run: go test -run '^$' -bench PublisherTraced
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
				cfg.Tracer = tp.Tracer("bench")
			}
			p, err := New(nc, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			if _, err := p.Resume(ctx); err != nil {
				b.Fatal(err)
			}
			events := make([]upstream.Event, b.N)
			for i := range events {
				id := fmt.Sprintf("ev-%012d", i)
				events[i] = upstream.Event{ID: id, ResumeID: id, Name: "GATE_IN", Data: []byte(fmt.Sprintf(
					`{"id":%q,"timestamp":"2026-11-22T10:00:00Z","type":"GATE_IN","orderId":"BO-1","positionId":"P-1","observation":{"location":"DEHAM-CTA","observedLoadingUnit":{"loadingUnit":{"number":"MSKU%07d"}},"note":"%0200d"}}`,
					id, i%1000, 0))}
			}
			b.ResetTimer()
			start := time.Now()
			for i := range events {
				if err := p.Handle(ctx, events[i]); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := p.Resume(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}
