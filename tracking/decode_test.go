package tracking_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// TestDecodeEvent: what DecodeEvent takes and what it refuses, with the reason.
func TestDecodeEvent(t *testing.T) {
	at := time.Date(2026, 11, 25, 8, 30, 0, 250_000_000, time.UTC)
	for _, tc := range []struct {
		name, data string
		want       time.Time // of a decoded event
		wantErr    string    // in a *MalformedEventError
	}{
		{"upper case", `{"timestamp":"2026-11-25T08:30:00.25Z","type":"GATE_IN"}`, at, ""},
		{"lower case t and z, as RFC 3339 allows", `{"timestamp":"2026-11-25t08:30:00.25z","type":"GATE_IN"}`, at, ""},
		{"an offset", `{"timestamp":"2026-11-25T09:30:00.25+01:00","type":"GATE_IN"}`, at, ""},
		{"unknown members", `{"timestamp":"2026-11-25T08:30:00.25Z","type":"NEW_TYPE","x":[1,{}]}`, at, ""},
		{"no timestamp", `{"type":"GATE_IN"}`, time.Time{}, "timestamp is missing"},
		{"null timestamp", `{"timestamp":null,"type":"GATE_IN"}`, time.Time{}, "timestamp is missing"},
		{"not RFC 3339", `{"timestamp":"25.11.2026 08:30","type":"GATE_IN"}`, time.Time{}, "is not an RFC 3339 date-time"},
		{"a comma before the fraction", `{"timestamp":"2026-11-25T08:30:00,25Z","type":"GATE_IN"}`, time.Time{}, "is not an RFC 3339"},
		{"no type", `{"timestamp":"2026-11-25T08:30:00Z"}`, time.Time{}, "type is missing"},
		{"a type that is not a string", `{"timestamp":"2026-11-25T08:30:00Z","type":7}`, time.Time{}, "cannot unmarshal number"},
		{"seals not an array", `{"timestamp":"2026-11-25T08:30:00Z","type":"GATE_IN","observation":{"observedLoadingUnit":{"seals":{}}}}`,
			time.Time{}, "cannot unmarshal object"},
		{"an array", `[]`, time.Time{}, "cannot unmarshal array"},
		{"not JSON", `{"timestamp":`, time.Time{}, "unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nats.Header{}
			h.Set(tracking.HeaderMsgID, "ev-1")
			h.Set("ce-id", "unit%207%20%22gate%22%2050%25%20%C3%BC")
			h.Set("ce-time", "2026-11-25T08:30:00.25Z")
			ev, err := tracking.DecodeEvent("tracking.events.GATE_IN", h, []byte(tc.data))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !ev.Data.Timestamp.Equal(tc.want) || ev.ID != "ev-1" || ev.CloudEvent.ID != `unit 7 "gate" 50% ü` ||
					!ev.CloudEvent.Time.Equal(at) || string(ev.Raw) != tc.data {
					t.Errorf("%+v", ev)
				}
				return
			}
			var me *tracking.MalformedEventError
			if !errors.As(err, &me) || !errors.Is(err, tracking.ErrMalformedEvent) || !strings.Contains(err.Error(), tc.wantErr) ||
				me.ID != "ev-1" || string(me.Data) != tc.data || me.Msg != nil {
				t.Errorf("%v (%+v), want a malformed event: %q", err, me, tc.wantErr)
			}
		})
	}
}
