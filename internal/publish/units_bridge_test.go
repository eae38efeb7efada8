package publish_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
)

// TestBridgeEventSubjectsCarryUnits: a whole bridge against the simulator, which generates events of many
// loading units, with malformed unit numbers injected among them. Every stored event's subject is
// P.events.<TYPE>.<UNIT>, its unit the token of its data's number (UnitOf, and the same read with
// encoding/json), and the events after the malformed ones are stored too.
func TestBridgeEventSubjectsCarryUnits(t *testing.T) {
	t.Parallel()
	b := bridgetest.Start(t, bridgetest.Options{Sim: sim.Options{EventRate: 400}})
	malformed := []string{`"- / -"`, `"` + strings.Repeat("MSKU1234565", 940) + `"`, `12345`, `["MSKU1234565"]`,
		`"msku\u0000 123\n456-5\u001f"`, `"ÆØÅ-ısku 7654321"`, `null`}
	for i, number := range malformed {
		b.Sim().Inject(bridgetest.User, "bad-unit-"+string(rune('a'+i)), "GATE_IN", []byte(`{"type":"GATE_IN",`+
			`"timestamp":"2026-11-22T10:00:00Z","observation":{"observedLoadingUnit":{"loadingUnit":{"number":`+number+`}}}}`))
	}
	nc, err := b.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stream := layout.EventsStream(b.Prefix)
	// The simulator places the injected events after every event generated until the injection, which
	// on a busy machine may be many: wait for the injected ones and 100 after them.
	var stored []*jetstream.RawStreamMsg
	testutil.Eventually(t, 60*time.Second, "the malformed events stored, and 100 events after them", func() bool {
		stored = testutil.StreamContents(t, js, stream)
		injected, after := 0, 0
		for _, m := range stored {
			if strings.HasPrefix(m.Header.Get(publish.HeaderMsgID), "bad-unit-") {
				injected++
			} else if injected == len(malformed) {
				after++
			}
		}
		return injected == len(malformed) && after >= 100
	})
	units := map[string]int{}
	injected := 0
	for _, m := range stored {
		tokens := strings.Split(m.Subject, ".")
		if len(tokens) != 4 || tokens[0] != b.Prefix || tokens[1] != "events" {
			t.Fatalf("event on %q, want %s.events.<TYPE>.<UNIT>", m.Subject, b.Prefix)
		}
		if want := layout.TypeToken(m.Header.Get(publish.HeaderEventType)); tokens[2] != want {
			t.Errorf("event %s on %q, its type token is %q", m.Header.Get(publish.HeaderMsgID), m.Subject, want)
		}
		if u := publish.UnitOf(m.Data); tokens[3] != u {
			t.Errorf("event %s on %q, UnitOf its data %q", m.Header.Get(publish.HeaderMsgID), m.Subject, u)
		}
		if u := unitByEncodingJSON(m.Data); tokens[3] != u {
			t.Errorf("event %s on %q, its number read with encoding/json gives %q", m.Header.Get(publish.HeaderMsgID), m.Subject, u)
		}
		if strings.HasPrefix(m.Header.Get(publish.HeaderMsgID), "bad-unit-") {
			injected++
		}
		units[tokens[3]]++
	}
	if injected != len(malformed) {
		t.Errorf("%d of the %d events with malformed numbers stored", injected, len(malformed))
	}
	if len(units) < 10 || units[layout.NoUnit] > len(malformed) {
		t.Errorf("units %v: the simulator's events name many units, only the malformed ones none", units)
	}
	if n := testutil.StreamMsgs(t, js, layout.DLQStream(b.Prefix)); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

// unitByEncodingJSON reads the unit's number with encoding/json and maps it with layout.UnitToken.
func unitByEncodingJSON(data []byte) string {
	var ev struct {
		Observation struct {
			ObservedLoadingUnit struct {
				LoadingUnit struct {
					Number json.RawMessage `json:"number"`
				} `json:"loadingUnit"`
			} `json:"observedLoadingUnit"`
		} `json:"observation"`
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		return "(not decoded: " + err.Error() + ")"
	}
	var number string
	if raw := ev.Observation.ObservedLoadingUnit.LoadingUnit.Number; len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &number) != nil {
		return layout.NoUnit
	}
	return layout.UnitToken(number)
}
