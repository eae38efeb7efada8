package tracking_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// connect returns a client connection and its JetStream context, closed when the test ends.
func connect(t *testing.T, b *bridgetest.Bridge) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := b.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// inject has the upstream stream an event of type typ (with id as its SSE id) whose data is data, or a
// well-formed TrackingEvent with a truck observation when data is empty.
func inject(b *bridgetest.Bridge, id, typ, data string) {
	if data == "" {
		data = fmt.Sprintf(`{"id":%q,"timestamp":"2026-11-25T08:30:00.5Z","type":%q,"observation":{`+
			`"observedMeansOfTransport":{"modeOfTransport":"TRUCK","truck":{"licensePlate":"HH-EX 4711"}}},"extra":1}`, id, typ)
	}
	b.Sim().Inject(bridgetest.User, id, typ, []byte(data))
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestEventConsumerNext: a durable consumer filtered to two types gets exactly their events, decoded, with
// the id, the raw type and the CloudEvents attributes of their headers (an id with characters the
// binding percent-encodes comes back as it was); a malformed event is an error holding its message, and
// the next call goes on; a second consumer of the same durable name starts after what was acknowledged.
func TestEventConsumerNext(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{Configure: func(c *config.Config) { c.CESource = "urn:test:bridge 1" }})
	_, js := connect(t, b)
	oddID := `unit 7 "gate" 50% ü`
	inject(b, "ev-1", "GATE_IN", "")
	inject(b, "ev-2", "ARRIVED", "")
	inject(b, oddID, "GATE_OUT", "")
	inject(b, "ev-bad", "GATE_IN", `{"id":"ev-bad","type":"GATE_IN","timestamp":12}`)
	inject(b, "ev-5", "GATE_IN", "")
	ctx := ctxFor(t, 20*time.Second)

	if _, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{Types: []string{"GATE_IN"},
		Consumer: jetstream.ConsumerConfig{FilterSubject: "tracking.events.ARRIVED"}}); err == nil {
		t.Error("Types and a filter subject: no error")
	}
	c, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{
		Types: []string{"GATE_IN", "GATE_OUT", "GATE OUT"}, Consumer: jetstream.ConsumerConfig{Durable: "gates"}})
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, ctx, c)
	want := tracking.CloudEvent{SpecVersion: "1.0", ID: "ev-1", Source: "urn:test:bridge 1", Type: "tracking.events.GATE_IN",
		Time: time.Date(2026, 11, 25, 8, 30, 0, 500_000_000, time.UTC), DataContentType: "application/json"}
	if ev.ID != "ev-1" || ev.Type != "GATE_IN" || ev.Subject != "tracking.events.GATE_IN._" || ev.Unit != tracking.NoUnit ||
		ev.CloudEvent != want {
		t.Errorf("event: id %q type %q unit %q subject %q cloud event %+v", ev.ID, ev.Type, ev.Unit, ev.Subject, ev.CloudEvent)
	}
	if d := ev.Data; *d.Id != "ev-1" || d.Type != "GATE_IN" || !d.Timestamp.Equal(want.Time) ||
		*d.Observation.ObservedMeansOfTransport.Truck.LicensePlate != "HH-EX 4711" || !contains(ev.Raw, `"extra":1`) {
		t.Errorf("data %+v, raw %s", d, ev.Raw)
	}
	ack(t, ev)

	ev = next(t, ctx, c)
	if ev.ID != oddID || ev.CloudEvent.ID != oddID || ev.Type != "GATE_OUT" || *ev.Data.Id != oddID {
		t.Errorf("odd id: %q, ce-id %q, data id %q", ev.ID, ev.CloudEvent.ID, *ev.Data.Id)
	}
	ack(t, ev)

	_, err = c.Next(ctx)
	var me *tracking.MalformedEventError
	if !errors.Is(err, tracking.ErrMalformedEvent) || !errors.As(err, &me) || me.ID != "ev-bad" || me.Msg == nil ||
		me.Subject != "tracking.events.GATE_IN._" || !contains(me.Data, `"timestamp":12`) {
		t.Fatalf("malformed event: %v (%+v)", err, me)
	}
	if err := me.Msg.Term(); err != nil {
		t.Fatal(err)
	}
	if ev = next(t, ctx, c); ev.ID != "ev-5" {
		t.Errorf("after the malformed event: %q", ev.ID)
	}
	// ev-5 is left unacknowledged, and the consumer stopped: a new one of the same name gets it again,
	// then the next event, and nothing it acknowledged.
	c.Stop()
	inject(b, "ev-6", "GATE_OUT", "")
	c2, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{
		Types:    []string{"GATE_IN", "GATE_OUT"},
		Consumer: jetstream.ConsumerConfig{Durable: "gates", AckWait: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Stop()
	var ids []string
	for len(ids) < 2 {
		ev := next(t, ctx, c2)
		ack(t, ev)
		if !slices.Contains(ids, ev.ID) {
			ids = append(ids, ev.ID)
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"ev-5", "ev-6"}) {
		t.Errorf("the durable consumer resumed with %q, want ev-5 and ev-6", ids)
	}

	// Bind uses the durable as it is: its filter and ack wait stay, and it goes on after what was
	// acknowledged; it needs a name, and one that exists.
	c2.Stop()
	inject(b, "ev-7", "GATE_IN", "")
	bound, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{Bind: true, Types: []string{"ARRIVED"},
		Consumer: jetstream.ConsumerConfig{Durable: "gates", AckWait: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer bound.Stop()
	if info := bound.Consumer().CachedInfo(); info.Config.AckWait != 200*time.Millisecond || len(info.Config.FilterSubjects) != 4 {
		t.Errorf("bound consumer's configuration changed: %+v", info.Config)
	}
	if ev := next(t, ctx, bound); ev.ID != "ev-7" {
		t.Errorf("bound consumer: %q, want ev-7", ev.ID)
	}
	for _, cfg := range []tracking.EventConsumerConfig{{Bind: true}, {Bind: true, Consumer: jetstream.ConsumerConfig{Durable: "nobody"}}} {
		if _, err := tracking.NewEventConsumer(ctx, js, cfg); err == nil {
			t.Errorf("Bind to durable %q: no error", cfg.Consumer.Durable)
		}
	}
}

// TestEventConsumerConsume: Consume acknowledges what the handler took, has JetStream deliver again what
// it refused, hands malformed events to Malformed and terminates them; without Malformed it returns the
// malformed event's error; with ManualAck it leaves the acknowledgement to the handler. The bridge's fence
// markers on P.leader.>, stored in the same stream before the first event, reach neither the handler nor
// Malformed: the consumer filters on P.events.>.
func TestEventConsumerConsume(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{})
	_, js := connect(t, b)
	inject(b, "ev-1", "GATE_IN", "")
	inject(b, "ev-bad", "GATE_OUT", `{"id":"ev-bad","type":"GATE_OUT"}`) // no timestamp
	inject(b, "ev-2", "LOADED_ON_BARGE", "")                             // a type the document does not list
	inject(b, "ev-3", "GATE_OUT", "")
	ctx := ctxFor(t, 30*time.Second)
	testutil.EventuallyState(t, 10*time.Second, "the leader's markers are in the events stream", func() (bool, string) {
		s, err := js.Stream(ctx, tracking.Subjects{}.EventsStream())
		if err != nil {
			return false, err.Error()
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("tracking.leader.>"))
		if err != nil {
			return false, err.Error()
		}
		return len(info.State.Subjects) > 0, fmt.Sprintf("markers on %d subjects", len(info.State.Subjects))
	})

	var (
		mu        sync.Mutex
		seen      []string
		malformed []string
	)
	c, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{
		RetryDelay: 50 * time.Millisecond,
		Malformed: func(e *tracking.MalformedEventError) {
			mu.Lock()
			defer mu.Unlock()
			malformed = append(malformed, e.ID+": "+e.Err.Error())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	refused := false
	err = c.Consume(cctx, func(_ context.Context, ev *tracking.Event) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ev.ID+" "+ev.Subject)
		if ev.ID == "ev-2" && !refused {
			refused = true
			return errors.New("not now")
		}
		if len(seen) == 4 { // ev-1, ev-2 twice, ev-3
			stop()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ev-1 tracking.events.GATE_IN._", "ev-2 tracking.events.LOADED_ON_BARGE._",
		"ev-2 tracking.events.LOADED_ON_BARGE._", "ev-3 tracking.events.GATE_OUT._"}
	slices.Sort(seen)
	if !slices.Equal(seen, want) {
		t.Errorf("handled %q, want %q", seen, want)
	}
	if !slices.Equal(malformed, []string{"ev-bad: timestamp is missing"}) {
		t.Errorf("malformed %q", malformed)
	}
	testutil.EventuallyState(t, 5*time.Second, "every event settled", func() (bool, string) {
		info, err := c.Consumer().Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return info.NumAckPending == 0 && info.NumPending == 0, fmt.Sprintf("%+v", info)
	})

	// Without Malformed, Consume stops at the malformed event with its error.
	strict, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{Types: []string{"GATE_OUT"}})
	if err != nil {
		t.Fatal(err)
	}
	err = strict.Consume(ctx, func(context.Context, *tracking.Event) error { return nil })
	var me *tracking.MalformedEventError
	if !errors.As(err, &me) || me.ID != "ev-bad" {
		t.Errorf("Consume without Malformed: %v", err)
	}

	// ManualAck: the handler's events stay pending until it acknowledges them.
	manual, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{Types: []string{"GATE_IN"}, ManualAck: true})
	if err != nil {
		t.Fatal(err)
	}
	mctx, mstop := context.WithCancel(ctx)
	var held *tracking.Event
	if err := manual.Consume(mctx, func(_ context.Context, ev *tracking.Event) error { held = ev; mstop(); return nil }); err != nil {
		t.Fatal(err)
	}
	if info, err := manual.Consumer().Info(ctx); err != nil || info.NumAckPending != 1 {
		t.Fatalf("ManualAck: %+v %v", info, err)
	}
	ack(t, held)
	if info, err := manual.Consumer().Info(ctx); err != nil || info.NumAckPending != 0 {
		t.Errorf("after the handler's ack: %+v %v", info, err)
	}
}

func next(t *testing.T, ctx context.Context, c *tracking.EventConsumer) *tracking.Event {
	t.Helper()
	ev, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func ack(t *testing.T, ev *tracking.Event) {
	t.Helper()
	if err := ev.Msg.DoubleAck(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func contains(data []byte, part string) bool { return strings.Contains(string(data), part) }

// FuzzDecodeEvent: any data and header values decode into an event or give a *MalformedEventError, never
// a panic; a decoded event has the members the document requires.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"timestamp":"2026-11-25T08:30:00Z","type":"GATE_IN"}`), "ev-1", "2026-11-25T08:30:00Z", "a%20b")
	f.Add([]byte(`{"timestamp":null,"type":7}`), "", "x", "%zz")
	f.Add([]byte(`[]`), "\x00", "", "%")
	f.Add([]byte(`{"observation":{"observedLoadingUnit":{"seals":{}}}}`), "id", "t", "")
	f.Fuzz(func(t *testing.T, data []byte, id, ceTime, ceID string) {
		h := nats.Header{}
		h.Set(tracking.HeaderMsgID, id)
		h.Set("ce-time", ceTime)
		h.Set("ce-id", ceID)
		ev, err := tracking.DecodeEvent("tracking.events.X", h, data)
		switch {
		case err != nil && !errors.Is(err, tracking.ErrMalformedEvent):
			t.Fatalf("error %v is not ErrMalformedEvent", err)
		case err == nil && (ev.Data.Timestamp.IsZero() || ev.Data.Type == ""):
			t.Fatalf("decoded without timestamp or type: %+v", ev.Data)
		}
	})
}
