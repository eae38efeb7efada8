package publish

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

func TestUnitOf(t *testing.T) {
	for _, c := range []struct{ data, want string }{
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"msku 123456-7"}}}}`, "MSKU1234567"},
		{`{"id":"x","observation":{"a":1,"observedLoadingUnit":{"loadingUnit":{"type":"C","number":"TGHU7654321"},"b":[1]}}}`, "TGHU7654321"},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"\u006dsku1"}}}}`, "MSKU1"},
		{`{"\u006fbservation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}}}`, "A1"},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":12345}}}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":["A1"]}}}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"--"}}}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":"A1"}}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{}}}}`, layout.NoUnit},
		{`{"number":"A1","loadingUnit":{"number":"B2"}}`, layout.NoUnit},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}},"observation":{}}`, layout.NoUnit},
		{`{"observation":{},"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}}}`, "A1"},
		{`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}}`, layout.NoUnit}, // not valid JSON
		{`[]`, layout.NoUnit},
		{``, layout.NoUnit},
	} {
		if got := UnitOf([]byte(c.data)); got != c.want {
			t.Errorf("UnitOf(%s) = %q, want %q", c.data, got, c.want)
		}
	}
}

// TestPublishUnitSubjects: every event goes to P.events.<TYPE>.<UNIT>, whatever its unit number holds
// (only separators, 10 KB, not a string, an array, control characters, letters outside ASCII, an
// escape), with the headers of an event without a unit; none is dead-lettered for its unit, and the
// events after them are published as well. Data that is not JSON is still dead-lettered.
func TestPublishUnitSubjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	p := e.publisher(8, nil)
	ctx := context.Background()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	withUnit := func(number string) string {
		return `{"type":"GATE_IN","timestamp":"2026-11-22T10:00:00Z","observation":{"observedLoadingUnit":` +
			`{"loadingUnit":{"containerClass":"CONTAINER","number":` + number + `}},"location":{"id":"DEHAM"}}}`
	}
	cases := []struct{ data, unit string }{
		{withUnit(`"MSKU1234565"`), "MSKU1234565"},
		{withUnit(`"msku 123456-5"`), "MSKU1234565"},
		{withUnit(`" -/.: "`), "_"},
		{withUnit(`"` + strings.Repeat("MSKU 1234565 ", 800) + `"`), "_"}, // 10 KB
		{withUnit(`"` + strings.Repeat("-", 10<<10) + `"`), "_"},
		{withUnit(`12345`), "_"},
		{withUnit(`null`), "_"},
		{withUnit(`{"number":"A1"}`), "_"},
		{withUnit(`["MSKU1234565"]`), "_"},
		{withUnit(`"MSKU\u0000123\n4565\t"`), "MSKU1234565"},
		{withUnit(`"MSKU\u001b[31m1234565"`), "MSKU31M1234565"},
		{withUnit(`"ÄÖÜ-ısku 1234565"`), "ISKU1234565"},
		{withUnit(`"中国1234565"`), "1234565"},
		{withUnit(`"\u006dsku1234565"`), "MSKU1234565"},
		{withUnit(`"` + strings.Repeat("A", 64) + `"`), strings.Repeat("A", 64)},
		{withUnit(`"` + strings.Repeat("A", 65) + `"`), "_"},
		{`{"type":"GATE_IN","observation":"MSKU1234565"}`, "_"},
		{`{"type":"GATE_IN"}`, "_"},
		{withUnit(`"TGHU7654321"`), "TGHU7654321"},
	}
	for i, c := range cases {
		id := fmt.Sprintf("ev-%02d", i)
		if err := p.Handle(ctx, upstream.Event{ID: id, ResumeID: id, Data: []byte(c.data)}); err != nil {
			t.Fatal(err)
		}
	}
	notJSON := `{"type":"GATE_IN","observation":{"observedLoadingUnit":{"loadingUnit":{"number":"MSKU1234565"}}}`
	if err := p.Handle(ctx, upstream.Event{ID: "bad", ResumeID: "bad", Data: []byte(notJSON)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Handle(ctx, ev("last", "GATE_OUT")); err != nil {
		t.Fatal(err)
	}
	if last, err := p.Resume(ctx); err != nil || last != "last" {
		t.Fatalf("Resume = %q, %v: the event path stopped", last, err)
	}
	msgs := e.messages(e.layout.Events())
	if len(msgs) != len(cases)+1 {
		t.Fatalf("stored %d events, want %d", len(msgs), len(cases)+1)
	}
	for i, c := range cases {
		m := msgs[i]
		if want := "tracking.events.GATE_IN." + c.unit; m.Subject != want {
			t.Errorf("event %d (%.60s) on %q, want %q", i, c.data, m.Subject, want)
		}
		if u := UnitOf(m.Data); !strings.HasSuffix(m.Subject, "."+u) {
			t.Errorf("event %d on %q, but UnitOf of its data is %q", i, m.Subject, u)
		}
		if string(m.Data) != c.data {
			t.Errorf("event %d stored as %.60q, want its data verbatim", i, m.Data)
		}
		if got := m.Header.Get("ce-type"); got != "tracking.events.GATE_IN" {
			t.Errorf("event %d: ce-type %q, want the type's subject without the unit", i, got)
		}
		if got := m.Header.Get(HeaderMsgID); got != fmt.Sprintf("ev-%02d", i) {
			t.Errorf("event %d: Nats-Msg-Id %q", i, got)
		}
	}
	if m := msgs[len(cases)]; m.Subject != "tracking.events.GATE_OUT._" {
		t.Errorf("last event on %q", m.Subject)
	}
	dlq := e.messages(e.layout.DLQ())
	if len(dlq) != 1 || dlq[0].Header.Get(HeaderMsgID) != "bad" || string(dlq[0].Data) != notJSON {
		t.Errorf("dead letters %d, want only the event that is not JSON, verbatim", len(dlq))
	}
}

// TestCursorAcrossSubjectForms: an events stream holding events stored before the unit joined the
// subject (P.events.<TYPE>) and after (P.events.<TYPE>.<UNIT>) gives one cursor across both: `bridge
// cursor show` reads the newest of either form, and a publisher resuming on it recognises the old
// events when the upstream replays them and stores the next one on the new form.
func TestCursorAcrossSubjectForms(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	ctx := context.Background()
	if _, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: e.layout.Leases()}); err != nil {
		t.Fatal(err) // `bridge cursor show` names the lease's holder too
	}
	data := func(id string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"type":"GATE_IN","timestamp":"2026-11-22T10:00:00Z",`+
			`"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"MSKU1234565"}}}}`, id)
	}
	// Three events as a bridge stored them before: each names the event before it as stored.
	for i, id := range []string{"ev-1", "ev-2", "ev-3"} {
		m := nats.NewMsg("tracking.events.GATE_IN")
		m.Header.Set(HeaderMsgID, id)
		m.Header.Set(HeaderEventID, id)
		if i > 0 {
			m.Header.Set(HeaderResumeAfter, fmt.Sprintf("ev-%d", i))
		}
		m.Data = data(id)
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	c, err := ShowCursor(ctx, e.nc, e.layout, 8)
	if err != nil || c.LastEvent != "ev-3" || (c.ResumeAfter != "ev-2" && c.ResumeAfter != "ev-3") {
		t.Fatalf("cursor over the old subjects: %+v, %v", c, err)
	}
	p := e.publisher(8, nil)
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ev-2", "ev-3", "ev-4"} { // the upstream replays after the cursor
		if err := p.Handle(ctx, upstream.Event{ID: id, ResumeID: id, Data: data(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if last, err := p.Resume(ctx); err != nil || last != "ev-4" {
		t.Fatalf("Resume = %q, %v", last, err)
	}
	var subjects []string
	for _, m := range e.messages(e.layout.Events()) {
		subjects = append(subjects, m.Header.Get(HeaderMsgID)+" "+m.Subject)
	}
	want := []string{"ev-1 tracking.events.GATE_IN", "ev-2 tracking.events.GATE_IN", "ev-3 tracking.events.GATE_IN",
		"ev-4 tracking.events.GATE_IN.MSKU1234565"}
	if !slices.Equal(subjects, want) {
		t.Errorf("stored %q, want %q", subjects, want)
	}
	// The cursor may lag the newest event by a window; what lies between is recognised when replayed.
	if c, err = ShowCursor(ctx, e.nc, e.layout, 8); err != nil || c.LastEvent != "ev-4" || c.ResumeAfter < "ev-2" {
		t.Fatalf("cursor over both forms: %+v, %v", c, err)
	}
	p2 := e.publisher(8, nil)
	if _, err := p2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ev-3", "ev-4", "ev-5"} {
		if err := p2.Handle(ctx, upstream.Event{ID: id, ResumeID: id, Data: data(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if last, err := p2.Resume(ctx); err != nil || last != "ev-5" {
		t.Fatalf("Resume = %q, %v", last, err)
	}
	if n := len(e.messages(e.layout.Events())); n != 5 {
		t.Errorf("stored %d events, want 5: each once", n)
	}
}
