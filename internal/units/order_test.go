package units

import (
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

// TestOrder: instants compare whatever their zone and fraction; equal instants go to the larger id,
// bytewise; an event is not after itself; a timestamp that is not RFC 3339 is refused.
func TestOrder(t *testing.T) {
	at := func(s string) stamp {
		t.Helper()
		ts, ok := timestampOf([]byte(`{"timestamp":"` + s + `"}`))
		if !ok {
			t.Fatalf("%s refused", s)
		}
		return stamp{at: ts}
	}
	with := func(s stamp, id string) stamp { s.id = id; return s }
	for _, tc := range []struct {
		a, b stamp
		want bool
	}{
		{at("2026-03-01T12:00:01Z"), at("2026-03-01T12:00:00Z"), true},
		{at("2026-03-01T12:00:00.000000001Z"), at("2026-03-01T12:00:00Z"), true},
		{at("2026-03-01T12:30:00+01:00"), at("2026-03-01T12:00:00Z"), false}, // 11:30Z
		{with(at("2026-03-01T13:00:00+01:00"), "b"), with(at("2026-03-01T12:00:00.000Z"), "a"), true},
		{with(at("2026-03-01t12:00:00z"), "a"), with(at("2026-03-01T12:00:00Z"), "b"), false},
		{with(at("2026-03-01T12:00:00Z"), "a"), with(at("2026-03-01T12:00:00Z"), "a"), false},
		{with(at("2026-03-01T12:00:00Z"), "ab"), with(at("2026-03-01T12:00:00Z"), "a"), true},
	} {
		if got := tc.a.after(tc.b); got != tc.want {
			t.Errorf("%v after %v = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	for _, data := range []string{`{"timestamp":"2026-03-01 12:00:00Z"}`, `{"timestamp":"2026-03-01T12:00:00,5Z"}`,
		`{"timestamp":"2026-03-01T12:00:00+24:00"}`, `{"timestamp":1700000000}`, `{}`, `not json`, `[1]`,
		`{"timestamp":"2026-03-01T12:00:00"}`} {
		if _, ok := timestampOf([]byte(data)); ok {
			t.Errorf("timestampOf(%s) accepted", data)
		}
	}
}

// TestUnitOf: the unit of P.events.<TYPE>.<UNIT> is its last token, when it is one UnitToken makes; of
// the older P.events.<TYPE>, the data's number.
func TestUnitOf(t *testing.T) {
	data := []byte(`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"msku 123456-7"}}}}`)
	for _, tc := range []struct{ subject, want string }{
		{"tracking.events.GATE_IN.MSKU1234567", "MSKU1234567"},
		{"tracking.events.GATE_IN._", layout.NoUnit},
		{"tracking.events.GATE_IN.msku1234567", layout.NoUnit},
		{"tracking.events.GATE_IN", "MSKU1234567"},
		{"other.events.GATE_IN.MSKU1234567", layout.NoUnit},
	} {
		if got := unitOf("tracking.events.", tc.subject, data); got != tc.want {
			t.Errorf("unitOf(%s) = %q, want %q", tc.subject, got, tc.want)
		}
	}
}
