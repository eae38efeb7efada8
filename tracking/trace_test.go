package tracking_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// TestConsumeContinuesTrace: with the bridge's tracing on, Consume hands its handler a context that
// continues the event's trace: the parent is the bridge's span for that event, which the collector got.
func TestConsumeContinuesTrace(t *testing.T) {
	rcv := testutil.NewOTLPReceiver(t)
	b := bridgetest.Start(t, bridgetest.Options{Tracing: config.Tracing{Enabled: true, TracesURL: rcv.URL,
		ServiceName: "tracking-bridge", Sampler: "always_on", Ratio: 1, Timeout: time.Second}})
	_, js := connect(t, b)
	inject(b, "ev-1", "GATE_IN", "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{Types: []string{"GATE_IN"}})
	if err != nil {
		t.Fatal(err)
	}
	var got trace.SpanContext
	cctx, stop := context.WithCancel(ctx)
	if err := c.Consume(cctx, func(hctx context.Context, ev *tracking.Event) error {
		got = trace.SpanContextFromContext(hctx)
		stop()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !got.IsValid() || !got.IsRemote() || !got.IsSampled() {
		t.Fatalf("handler's span context %v", got)
	}
	testutil.Eventually(t, 10*time.Second, "the bridge's span for the event exported", func() bool {
		s, ok := rcv.BySpanID()[got.SpanID().String()]
		return ok && s.TraceID == got.TraceID().String() && s.Attrs["messaging.message.id"] == "ev-1"
	})
}

// TestCallsCarryTrace: a Client's call and a Reporter's report made with a context holding a span carry
// its trace context, and the bridge's spans for them (the API request's server span, the report's
// consumer span) are its children.
func TestCallsCarryTrace(t *testing.T) {
	rcv := testutil.NewOTLPReceiver(t)
	b := bridgetest.Start(t, bridgetest.Options{Tracing: config.Tracing{Enabled: true, TracesURL: rcv.URL,
		ServiceName: "tracking-bridge", Sampler: "parentbased_always_on", Ratio: 1, Timeout: time.Second}})
	nc, js := connect(t, b)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(ctxFor(t, 20*time.Second), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))

	if _, err := tracking.NewClient(nc, "").ListOrders(ctx); err != nil {
		t.Fatal(err)
	}
	tracked := b.Sim().TrackedOrders(bridgetest.User)[0]
	receipt, err := tracking.NewReporter(js, "").Report(ctx, tracking.TrackingEventReport{
		Order: &tracking.IncomingTrackingOrder{OrderId: tracked.OrderID, PositionId: tracked.PositionID},
		Event: tracking.TrackingEvent{Timestamp: time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC), Type: "GATE_IN"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ name, key, value string }{
		{"tracking.api.orders.list", "rpc.method", "orders.list"},
		{"process tracking.reports", "messaging.message.id", receipt.MsgID},
	} {
		testutil.Eventually(t, 15*time.Second, "the bridge's span "+want.name+" in the caller's trace", func() bool {
			return len(rcv.Find(func(s testutil.ReceivedSpan) bool {
				return s.Name == want.name && s.Attrs[want.key] == want.value && s.TraceID == tid.String() && s.Parent == sid.String()
			})) == 1
		})
	}
}

// Continue an event's trace in a consumer: spans started from the returned context (with the service's
// own OpenTelemetry tracer) are children of the bridge's span for the event.
func ExampleContinueTrace() {
	// msg is an event as a subscription or a JetStream consumer delivers it (jetstream.Msg: Headers()).
	msg := &nats.Msg{Subject: "tracking.events.GATE_IN.MSKU1234565", Header: nats.Header{
		tracking.HeaderTraceparent: {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}
	ctx := tracking.ContinueTrace(context.Background(), msg.Header)
	parent := trace.SpanContextFromContext(ctx)
	fmt.Println(parent.TraceID(), parent.SpanID(), parent.IsSampled())
	// Output: 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 true
}
