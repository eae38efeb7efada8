package publish

import (
	"strings"
	"testing"
	"time"
)

// TestReportedKey: a report's key is the subject and timestamp its event gets on the stream: the type
// and unit made tokens, a report without a unit (or whose unit number is not a string) under the
// no-unit token and one without a type under the unknown type's, the same instant whatever its offset;
// a report without a valid timestamp, or whose event is not an object, has none.
func TestReportedKey(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 1, 0, time.UTC).UnixNano()
	for _, tc := range []struct {
		body, subject string
		ok            bool
	}{
		{`{"event":{"type":"GATE_IN","timestamp":"2026-05-01T12:00:01Z","observation":{"observedLoadingUnit":` +
			`{"loadingUnit":{"number":"MSCU1234565"}}}}}`, "tracking.events.GATE_IN.MSCU1234565", true},
		{`{"event":{"type":"gate in","timestamp":"2026-05-01T14:00:01+02:00"}}`, "tracking.events.gate_in._", true},
		{`{"event":{"type":"GATE_IN","timestamp":"2026-05-01T12:00:01Z","observation":{"observedLoadingUnit":` +
			`{"loadingUnit":{"number":1234565}}}}}`, "tracking.events.GATE_IN._", true},
		{`{"event":{"timestamp":"2026-05-01T12:00:01Z"}}`, "tracking.events.UNKNOWN._", true},
		{`{"Event":{"type":"GATE_IN","timestamp":"2026-05-01T12:00:01Z"}}`, "tracking.events.GATE_IN._", true},
		{`{"event":{"type":"GATE_IN","timestamp":"2026-05-01T12:00:01.` + strings.Repeat("0", 50) + `Z"}}`, "", false}, // longer than ce-time carries
		{`{"event":[1]}`, "", false},
		{`{"event":{"type":"GATE_IN","timestamp":"2026-05-01T12:00:01Z"}`, "", false},
		{`{"event":{"type":"GATE_IN","timestamp":"yesterday"}}`, "", false},
		{`not json`, "", false},
	} {
		k, ok := ReportedKey("tracking", []byte(tc.body))
		if ok != tc.ok || ok && (k.Subject != tc.subject || k.At != at) {
			t.Errorf("%s: %+v %v, want %s at %d, %v", tc.body, k, ok, tc.subject, at, tc.ok)
		}
	}
}
