package tracking_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// TestUnitToken: the unit tokens of docs/subjects.md#subjects, the bridge's own mapping.
func TestUnitToken(t *testing.T) {
	for _, number := range []string{"MSKU1234565", "msku 123456-5", "", " -/. ", "ıé1", "a\x00b\n", "\xff",
		"MSKU.1*2>", "ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLM"} {
		if got, want := tracking.UnitToken(number), layout.UnitToken(number); got != want {
			t.Errorf("UnitToken(%q) = %q, the bridge uses %q", number, got, want)
		}
	}
	if tracking.UnitToken("msku 123456-5") != "MSKU1234565" || tracking.UnitToken("--") != tracking.NoUnit {
		t.Error("UnitToken does not give the documented examples")
	}
}

// TestEventFilters: the filters by type keep the old subjects of the type; by unit and by both they
// name the unit; repeats go.
func TestEventFilters(t *testing.T) {
	s := tracking.Subjects{}
	for _, c := range []struct {
		types, units, want []string
	}{
		{nil, nil, []string{"tracking.events.>"}},
		{[]string{"GATE_IN", "GATE IN", "ARRIVED"}, nil, []string{"tracking.events.GATE_IN.*", "tracking.events.GATE_IN",
			"tracking.events.ARRIVED.*", "tracking.events.ARRIVED"}},
		{nil, []string{"msku 123456-5", "MSKU1234565", "--"}, []string{"tracking.events.*.MSKU1234565", "tracking.events.*._"}},
		{[]string{"GATE_IN", "GATE_OUT"}, []string{"MSKU1234565"}, []string{"tracking.events.GATE_IN.MSKU1234565",
			"tracking.events.GATE_OUT.MSKU1234565"}},
	} {
		if got := s.EventFilters(c.types, c.units); !slices.Equal(got, c.want) {
			t.Errorf("EventFilters(%q, %q) = %q, want %q", c.types, c.units, got, c.want)
		}
	}
}

// TestEventConsumerUnits: a consumer by type reads the events of the type stored before the subject
// carried the unit (on P.events.<TYPE>) and those after it, from the start of the stream; a consumer by
// unit reads that unit's events of every type; one by both reads their intersection. Event.Unit is the
// unit's token, from the data, for the old events too.
func TestEventConsumerUnits(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{})
	_, js := connect(t, b)
	ctx := ctxFor(t, 30*time.Second)
	event := func(id, typ, number string) string {
		return fmt.Sprintf(`{"id":%q,"timestamp":"2026-11-25T08:30:00Z","type":%q,"observation":`+
			`{"observedLoadingUnit":{"loadingUnit":{"number":%q}}}}`, id, typ, number)
	}
	// Two events as a bridge stored them before the unit joined the subject.
	for _, old := range [][2]string{{"old-1", "GATE_IN"}, {"old-2", "ARRIVED"}} {
		m := nats.NewMsg("tracking.events." + old[1])
		m.Header.Set(tracking.HeaderMsgID, old[0])
		m.Header.Set(tracking.HeaderEventType, old[1])
		m.Data = []byte(event(old[0], old[1], "msku 123456-5"))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range [][3]string{{"ev-1", "GATE_IN", "MSKU 123456-5"}, {"ev-2", "GATE_IN", "TGHU7654321"},
		{"ev-3", "ARRIVED", "MSKU1234565"}, {"ev-4", "GATE_IN", "--"}} {
		inject(b, e[0], e[1], event(e[0], e[1], e[2]))
	}
	stream := tracking.Subjects{}.EventsStream()
	testutil.Eventually(t, 20*time.Second, "six events stored", func() bool { return testutil.StreamMsgs(t, js, stream) == 6 })

	for _, c := range []struct {
		name         string
		types, units []string
		want         []string // ids
		wantUnits    []string
	}{
		{"all", nil, nil, []string{"old-1", "old-2", "ev-1", "ev-2", "ev-3", "ev-4"},
			[]string{"MSKU1234565", "MSKU1234565", "MSKU1234565", "TGHU7654321", "MSKU1234565", "_"}},
		{"by type", []string{"GATE_IN"}, nil, []string{"old-1", "ev-1", "ev-2", "ev-4"},
			[]string{"MSKU1234565", "MSKU1234565", "TGHU7654321", "_"}},
		{"by unit", nil, []string{"msku1234565"}, []string{"ev-1", "ev-3"}, []string{"MSKU1234565", "MSKU1234565"}},
		{"by both", []string{"GATE_IN"}, []string{"MSKU1234565"}, []string{"ev-1"}, []string{"MSKU1234565"}},
		{"no unit", nil, []string{""}, []string{"ev-4"}, []string{"_"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cons, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{Types: c.types, Units: c.units,
				Consumer: jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Stop()
			var ids, units []string
			for len(ids) < len(c.want) {
				ev := next(t, ctx, cons)
				ack(t, ev)
				ids, units = append(ids, ev.ID), append(units, ev.Unit)
			}
			if !slices.Equal(ids, c.want) || !slices.Equal(units, c.wantUnits) {
				t.Errorf("events %q of units %q, want %q of %q", ids, units, c.want, c.wantUnits)
			}
			if info, err := cons.Consumer().Info(ctx); err != nil || info.NumPending != 0 {
				t.Errorf("more events match: %+v %v", info, err)
			}
		})
	}
	if _, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{Units: []string{"A1"},
		Consumer: jetstream.ConsumerConfig{FilterSubject: "tracking.events.>"}}); err == nil {
		t.Error("Units and a filter subject: no error")
	}
}
