package tracking_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// launch runs a whole bridge (NATS, the upstream simulator, the daemon) for an example and connects to
// it. A service connects to its own NATS instead.
func launch() (*bridgetest.Bridge, *nats.Conn) {
	b, err := bridgetest.Launch(bridgetest.Options{})
	if err != nil {
		panic(err)
	}
	nc, err := nats.Connect(b.NATSURL)
	if err != nil {
		panic(err)
	}
	return b, nc
}

// Call the provider's API through the bridge: find a terminal, book a pick-up there and read it back.
func ExampleClient() {
	b, nc := launch()
	defer b.Stop()
	defer nc.Close()

	client := tracking.NewClient(nc, tracking.DefaultPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	page, err := client.SearchLocations(ctx, tracking.SearchLocationsParams{
		Type: new(tracking.LocationTypeADMINISTRATIVETERMINAL), PageSize: new(int32(1)),
	})
	if err != nil {
		panic(err)
	}
	terminal := (*page.Data)[0]
	fmt.Println("terminal:", *terminal.Id, terminal.Designation)

	created, err := client.CreateOrder(ctx, tracking.BookingOrder{
		TerminalId: *terminal.Id,
		Action:     tracking.BookingActionPICKUP,
		Reference:  "PICKUP-4711",
		Unit:       tracking.BookingUnit{LoadingState: tracking.LoadingStateFULL, IsoCode: new("22G1")},
	})
	if err != nil {
		panic(err)
	}
	order, err := client.GetOrder(ctx, created.Id)
	if err != nil {
		panic(err)
	}
	fmt.Println("order:", *order.Id, order.Action, order.Reference, order.Unit.LoadingState, *order.Unit.IsoCode)

	// Failures are *APIError values, which errors.Is matches with the sentinel of their code.
	_, err = client.GetOrder(ctx, "BO-99999999")
	var apiErr *tracking.APIError
	if errors.As(err, &apiErr) && errors.Is(err, tracking.ErrNotFound) {
		fmt.Println("error:", apiErr.Code, apiErr.Messages, "temporary:", apiErr.Temporary())
	}
	// Output:
	// terminal: L10001 Terminal Duisburg-Ruhrort
	// order: BO-00000001 PICK_UP PICKUP-4711 FULL 22G1
	// error: 404 [Order BO-99999999 not found] temporary: false
}

// Read the gate events (GATE_IN and GATE_OUT) the bridge publishes, with a durable JetStream consumer
// that keeps its place across restarts.
func ExampleEventConsumer() {
	b, nc := launch()
	defer b.Stop()
	defer nc.Close()
	// The upstream streams three events of one container; the bridge publishes each to
	// tracking.events.<TYPE>.<UNIT>.
	for i, typ := range []string{"GATE_IN", "ARRIVED", "GATE_OUT"} {
		id := fmt.Sprintf("ev-%d", i+1)
		b.Sim().Inject(bridgetest.User, id, typ, fmt.Appendf(nil, `{"id":%q,"timestamp":"2026-11-25T08:3%d:00Z","type":%q,`+
			`"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"MSKU 123456-5"}}}}`, id, i, typ))
	}

	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{
		Types:    []string{"GATE_IN", "GATE_OUT"},
		Consumer: jetstream.ConsumerConfig{Durable: "gate-monitor"},
	})
	if err != nil {
		panic(err)
	}
	defer events.Stop()
	for range 2 {
		ev, err := events.Next(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(ev.Subject, ev.ID, ev.Type, ev.Unit, ev.Data.Timestamp.Format(time.RFC3339), ev.CloudEvent.Type)
		if err := ev.Msg.Ack(); err != nil {
			panic(err)
		}
	}
	// Output:
	// tracking.events.GATE_IN.MSKU1234565 ev-1 GATE_IN MSKU1234565 2026-11-25T08:30:00Z tracking.events.GATE_IN
	// tracking.events.GATE_OUT.MSKU1234565 ev-3 GATE_OUT MSKU1234565 2026-11-25T08:32:00Z tracking.events.GATE_OUT
}

// Handle each event with Consume, which acknowledges an event once the handler returns nil, and skips
// (and terminates) one whose data is not a TrackingEvent after telling Malformed.
func ExampleEventConsumer_Consume() {
	b, nc := launch()
	defer b.Stop()
	defer nc.Close()
	b.Sim().Inject(bridgetest.User, "ev-1", "GATE_IN", []byte(`{"timestamp":"2026-11-25T08:30:00Z","type":"GATE_IN"}`))
	b.Sim().Inject(bridgetest.User, "ev-2", "GATE_IN", []byte(`{"timestamp":"yesterday","type":"GATE_IN"}`))
	b.Sim().Inject(bridgetest.User, "ev-3", "HANDLING_STARTED", []byte(`{"timestamp":"2026-11-25T08:40:00Z","type":"HANDLING_STARTED"}`))

	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{
		Malformed: func(err *tracking.MalformedEventError) { fmt.Println("skipped:", err) },
	})
	if err != nil {
		panic(err)
	}
	err = events.Consume(ctx, func(ctx context.Context, ev *tracking.Event) error {
		fmt.Println(ev.ID, ev.Type, ev.Data.Timestamp.Format(time.Kitchen))
		if ev.ID == "ev-3" {
			cancel() // Consume returns nil once ctx is done
		}
		return nil
	})
	fmt.Println("Consume:", err)
	// Output:
	// ev-1 GATE_IN 8:30AM
	// skipped: tracking: malformed event "ev-2" on tracking.events.GATE_IN._: timestamp "yesterday" is not an RFC 3339 date-time
	// ev-3 HANDLING_STARTED 8:40AM
	// Consume: <nil>
}

// Report an event for the bridge to send upstream: through JetStream, with an idempotency key, so that
// publishing it again after a failure cannot report it twice.
func ExampleReporter() {
	b, nc := launch()
	defer b.Stop()
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	reporter := tracking.NewReporter(js, tracking.DefaultPrefix)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	report := tracking.TrackingEventReport{
		Order: &tracking.IncomingTrackingOrder{OrderId: "TO03804118", PositionId: "10"},
		Event: tracking.TrackingEvent{
			Timestamp: time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC),
			Type:      "GATE_IN",
		},
		Reporter: &tracking.Operator{Name: new("gate 7")},
	}
	for range 2 {
		r, err := reporter.Report(ctx, report, "gate7-000042")
		if err != nil {
			panic(err)
		}
		fmt.Println(r.MsgID, r.Stream, r.Sequence, "duplicate:", r.Duplicate)
	}

	// A report the bridge would refuse is not published.
	_, err = reporter.ReportJSON(ctx, []byte(`{"event":{"type":"GATE_IN","timestamp":"25.11.2026 08:30"}}`), "")
	fmt.Println(errors.Is(err, tracking.ErrInvalidReport), err)
	// Output:
	// gate7-000042 TRACKING_REPORTS 1 duplicate: false
	// gate7-000042 TRACKING_REPORTS 1 duplicate: true
	// true tracking: invalid report: event.timestamp is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): "25.11.2026 08:30"
}

func ExampleSubjects() {
	s := tracking.Subjects{Prefix: "acme.tracking"}
	fmt.Println(s.Event("GATE_IN", "msku 123456-5"))
	fmt.Println(s.EventsOfType("GATE_IN"), s.EventsOfUnit("MSKU1234565"))
	fmt.Println(s.EventFilters([]string{"GATE_IN"}, nil))
	fmt.Println(s.Events(), s.EventsStream())
	fmt.Println(s.Reports(), s.ReportsStream())
	fmt.Println(s.DLQ(), s.DLQStream())
	fmt.Println(s.API(tracking.OpGetOrder))
	// Output:
	// acme.tracking.events.GATE_IN.MSKU1234565
	// acme.tracking.events.GATE_IN.* acme.tracking.events.*.MSKU1234565
	// [acme.tracking.events.GATE_IN.* acme.tracking.events.GATE_IN]
	// acme.tracking.events.> ACME_TRACKING_EVENTS
	// acme.tracking.reports ACME_TRACKING_REPORTS
	// acme.tracking.dlq.> ACME_TRACKING_DLQ
	// acme.tracking.api.orders.get
}

func ExampleTypeToken() {
	for _, typ := range []string{"GATE_IN", "LOADED_ON_BARGE", "gate in.x", "", "Zöll"} {
		fmt.Printf("%q → %s\n", typ, tracking.TypeToken(typ))
	}
	// Output:
	// "GATE_IN" → GATE_IN
	// "LOADED_ON_BARGE" → LOADED_ON_BARGE
	// "gate in.x" → gate_in_x
	// "" → UNKNOWN
	// "Zöll" → Z_ll
}
