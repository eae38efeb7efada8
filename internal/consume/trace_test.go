package consume

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestDeadLetterPublishFailureSpan: a report whose dead letter cannot be stored is handed back for a
// redelivery, and its span says so: a redelivery, not a dead letter with status error.
func TestDeadLetterPublishFailureSpan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	cfg := e.config()
	cfg.DLQSubject = "nowhere.dlq.reports" // no stream captures it: every dead-letter publish fails
	cfg.Tracer = tp.Tracer("test")
	c := e.start(e.js, cfg)
	e.publish(`{"event":{}}`, jetstream.MsgIDHeader, "bad")

	testutil.Eventually(t, 10*time.Second, "a failed dead-letter publish and its span ended", func() bool {
		return c.Stats().DeadLetterFailures >= 1 && len(rec.Ended()) >= 1
	})
	s := rec.Ended()[0]
	var events []string
	for _, ev := range s.Events() {
		events = append(events, ev.Name)
	}
	if len(events) != 1 || events[0] != spanRedelivery || s.Status().Code == codes.Error {
		t.Errorf("span of a report whose dead letter failed: events %v, status %v; want one %s event, no error",
			events, s.Status(), spanRedelivery)
	}
}
