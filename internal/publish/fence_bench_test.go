package publish

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// BenchmarkPublisherFence measures the publisher with and without the fence
// (docs/replicas.md#the-fence), on one server and on an R3 stream of a 3-node cluster:
// events of about 400 bytes handed to Handle, then Resume, as the stream does. The fenced publisher has at
// most FenceWidth events in flight (see FenceWidth). Figures go to docs/performance.md; run: go test -run
// '^$' -bench PublisherFence -benchtime 20000x ./internal/publish/
func BenchmarkPublisherFence(b *testing.B) {
	for _, backend := range []string{"server", "R3"} {
		b.Run(backend, func(b *testing.B) {
			var connect func() *nats.Conn
			replicas := 1
			if backend == "server" {
				connect = testutil.StartNATS(b, nil).Connect
			} else {
				connect = testutil.StartCluster(b).Connect
				replicas = 3
			}
			nc := connect()
			js, _ := jetstream.New(nc)
			run := 0
			for _, fenced := range []bool{false, true} {
				name := "unfenced"
				if fenced {
					name = "fenced"
				}
				b.Run(name, func(b *testing.B) {
					run++
					layout := layout.Streams{Prefix: fmt.Sprintf("b%d", run), DuplicateWindow: time.Minute, Replicas: replicas}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
					defer cancel()
					if err := layout.Ensure(ctx, js, true, discard()); err != nil {
						b.Fatal(err)
					}
					cfg := Config{Prefix: layout.Prefix, EventsStream: layout.Events(), DLQStream: layout.DLQ(),
						Window: 1024, Timeout: 10 * time.Second, Logger: discard()}
					if fenced {
						cfg.FenceSubject = layout.FenceSubject()
					}
					p, err := New(nc, cfg)
					if err != nil {
						b.Fatal(err)
					}
					defer p.Close()
					if fenced {
						if err := p.Claim(ctx, "bench", nil); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := p.Resume(ctx); err != nil {
						b.Fatal(err)
					}
					benchHandle(ctx, b, p, b.N)
				})
			}
		})
	}
}

// benchHandle hands p n events of ~400 bytes (1,000 units), then waits until every one is stored, and
// reports the events a second; the benchmark's timer runs from the first event.
func benchHandle(ctx context.Context, b *testing.B, p *Publisher, n int) {
	events := make([]upstream.Event, n)
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
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "events/s")
}
