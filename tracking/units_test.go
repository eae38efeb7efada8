package tracking_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// unitEvent is the data of an event of the loading unit number at minute min.
func unitEvent(id, typ, number string, min int) string {
	return fmt.Sprintf(`{"id":%q,"type":%q,"timestamp":"2026-11-25T08:%02d:00Z","observation":{"observedLoadingUnit":`+
		`{"loadingUnit":{"number":%q}}},"extra":1}`, id, typ, min, number)
}

// storeUnitEvent stores data on P.events.<TYPE>.<UNIT> with id as Nats-Msg-Id, as the bridge does.
func storeUnitEvent(t *testing.T, js jetstream.JetStream, prefix, typ, unit, id, data string) {
	t.Helper()
	m := nats.NewMsg(layout.EventSubject(prefix, typ, unit))
	m.Data = []byte(data)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(tracking.HeaderEventID, id)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// putUnit writes the units view's value of unit as the view writes it, when the view has none yet: the
// test's values are the ones the view computes from the same events, so a bridge that builds the view
// itself may have written it first.
func putUnit(t *testing.T, js jetstream.JetStream, prefix, unit, id, data string) {
	t.Helper()
	m := nats.NewMsg("$KV." + layout.UnitsBucket(prefix) + "." + unit)
	m.Data = []byte(data)
	m.Header.Set("Tracking-Event-Id", id)
	m.Header.Set("Tracking-Unit", unit)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	var api *jetstream.APIError
	if _, err := js.PublishMsg(context.Background(), m); err != nil && !(errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
		t.Fatal(err)
	}
}

// TestClientUnits: UnitLatest and UnitEvents against a real bridge: the latest event from the units
// view for the number as written, decoded and verbatim, with its unit token; ErrNotFound without one,
// ErrUnavailable while the view does not exist; the most recent events oldest first, a limit, the
// default; ErrInvalid for a number that names no unit and a limit out of range; an event that is not a
// TrackingEvent comes with its error, beside the others; events the upstream streams are among a unit's
// events once the bridge stored them.
func TestClientUnits(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{})
	nc, js := connect(t, b)
	c := tracking.NewClient(nc, b.Prefix)
	ctx := ctxFor(t, 60*time.Second)
	const number, unit = "zzzu 000001-1", "ZZZU0000011"

	var stored []string
	for i := range 25 {
		typ := []string{"GATE_IN", "DEPARTED", "ARRIVED", "GATE_OUT"}[i%4]
		id := fmt.Sprint("zu-", i)
		data := unitEvent(id, typ, number, i)
		if i == 7 {
			data = `{"id":"zu-7","timestamp":"2026-11-25T08:07:00Z","observation":{"observedLoadingUnit":{"loadingUnit":{"number":"ZZZU0000011"}}}}`
		}
		storeUnitEvent(t, js, b.Prefix, typ, unit, id, data)
		stored = append(stored, data)
	}

	// The view: the test writes it when the bridge does not build it (then it does not exist yet).
	kv, err := js.KeyValue(ctx, layout.UnitsBucket(b.Prefix))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if _, err := c.UnitLatest(ctx, number); !errors.Is(err, tracking.ErrUnavailable) || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("without the bucket: %v, want ErrUnavailable", err)
		}
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: layout.UnitsBucket(b.Prefix), History: 1})
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.UnitLatest(ctx, "ZZZU9999999"); !errors.Is(err, tracking.ErrNotFound) {
		t.Errorf("a unit without events: %v, want ErrNotFound", err)
	}
	putUnit(t, js, b.Prefix, unit, "zu-24", stored[24])
	testutil.Eventually(t, 10*time.Second, "the view's value", func() bool {
		e, err := kv.Get(ctx, unit)
		return err == nil && string(e.Value()) == stored[24]
	})
	latest, err := c.UnitLatest(ctx, number)
	if err != nil {
		t.Fatal(err)
	}
	if latest.Unit != unit || string(latest.Raw) != stored[24] || latest.Err != nil || *latest.Data.Id != "zu-24" ||
		latest.Data.Type != "GATE_IN" || !latest.Data.Timestamp.Equal(time.Date(2026, 11, 25, 8, 24, 0, 0, time.UTC)) ||
		*latest.Data.Observation.ObservedLoadingUnit.LoadingUnit.Number != number {
		t.Errorf("UnitLatest: %+v", latest)
	}

	h, err := c.UnitEvents(ctx, number, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Unit != unit || len(h.Events) != 20 {
		t.Fatalf("UnitEvents default: unit %q, %d events", h.Unit, len(h.Events))
	}
	for i, ev := range h.Events {
		if string(ev.Raw) != stored[5+i] || ev.Unit != unit {
			t.Errorf("event %d: %s, want %s", i, ev.Raw, stored[5+i])
		}
		if (ev.Err != nil) != (5+i == 7) {
			t.Errorf("event %d: error %v", i, ev.Err)
		}
	}
	if ev := h.Events[2]; !errors.Is(ev.Err, tracking.ErrMalformedEvent) || !strings.Contains(ev.Err.Error(), `"zu-7"`) {
		t.Errorf("the event without a type: %v", ev.Err)
	}
	if h, err = c.UnitEvents(ctx, unit, 3); err != nil || len(h.Events) != 3 || string(h.Events[0].Raw) != stored[22] {
		t.Errorf("UnitEvents limit 3: %+v %v", h, err)
	}
	if h, err = c.UnitEvents(ctx, "ZZZU9999999", 5); err != nil || h.Unit != "ZZZU9999999" || len(h.Events) != 0 {
		t.Errorf("UnitEvents of a unit without events: %+v %v", h, err)
	}

	// Events the upstream streams reach units.events on their way through the bridge: on
	// P.events.<TYPE>.<UNIT>, in the order the bridge stored them, verbatim.
	var streamed []string
	for i, typ := range []string{"GATE_IN", "DEPARTED", "ARRIVED"} {
		id := fmt.Sprint("zs-", i)
		data := unitEvent(id, typ, "zzzu 000002-2", 30+i)
		inject(b, id, typ, data)
		streamed = append(streamed, data)
	}
	testutil.EventuallyState(t, 30*time.Second, "the streamed events in units.events", func() (bool, string) {
		h, err := c.UnitEvents(ctx, "ZZZU 000002-2", 0)
		if err != nil || h.Unit != "ZZZU0000022" || len(h.Events) != len(streamed) {
			return false, fmt.Sprint(h, err)
		}
		for i, ev := range h.Events {
			if string(ev.Raw) != streamed[i] || ev.Err != nil {
				t.Fatalf("streamed event %d: %s %v, want %s", i, ev.Raw, ev.Err, streamed[i])
			}
		}
		return true, ""
	})

	for _, bad := range []struct {
		number string
		limit  int
	}{{"--//--", 0}, {"", 0}, {strings.Repeat("A", 65), 0}, {unit, -1}, {unit, 201}} {
		if _, err := c.UnitEvents(ctx, bad.number, bad.limit); !errors.Is(err, tracking.ErrInvalid) {
			t.Errorf("UnitEvents(%q, %d): %v, want ErrInvalid", bad.number, bad.limit, err)
		}
	}
	if _, err := c.UnitLatest(ctx, "a\x00b"); !errors.Is(err, tracking.ErrInvalid) {
		t.Errorf("UnitLatest with a control character: %v, want ErrInvalid", err)
	}
}
