package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// report returns a valid TrackingEventReport body for the tracked order position o.
func report(o TrackingOrder, typ string) map[string]any {
	return map[string]any{
		"order": map[string]any{"orderId": o.OrderID, "positionId": o.PositionID,
			"clientOrderReference": o.ClientOrderReference, "clientPositionReference": o.ClientPositionReference},
		"transport": map[string]any{"identifier": "T-1", "voyageNumber": "V-2"},
		"event": map[string]any{
			"timestamp": "2025-03-14T10:15:00.5+01:00",
			"type":      typ,
			"observation": map[string]any{
				"observedMeansOfTransport": map[string]any{"modeOfTransport": "TRUCK", "truck": map[string]any{"countryCode": "DE", "licensePlate": "DU-AB 12", "forwarder": "F"}},
				"observedLoadingUnit": map[string]any{
					"loadingUnit": map[string]any{"containerClass": "CONTAINER", "identification": "BIC", "number": "CSQU3054383", "sizeType": "22G1"},
					"weight":      map[string]any{"gross": 12000.5, "net": 10000, "tare": 2000.5},
					"seals":       []any{map[string]any{"type": "OPERATOR", "number": "S1"}},
				},
				"location": map[string]any{"id": "L20001", "designation": "Duisburg <Gate>"},
			},
		},
		"reporter": map[string]any{"id": "R1", "name": "Reporter & Co", "address": map[string]any{"city": "Duisburg"}},
	}
}

func TestReportValidation(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	x1 := e.sim.TrackedOrders("demo")[1]
	ev := func(f func(r, ev map[string]any)) map[string]any {
		r := report(x1, "GATE_IN")
		f(r, r["event"].(map[string]any))
		return r
	}
	// obs changes the observation's means of transport, loading unit observation, loading unit and location.
	obs := func(f func(mot, lu, unit, loc map[string]any)) map[string]any {
		return ev(func(_, ev map[string]any) {
			o := ev["observation"].(map[string]any)
			lu := o["observedLoadingUnit"].(map[string]any)
			f(o["observedMeansOfTransport"].(map[string]any), lu, lu["loadingUnit"].(map[string]any), o["location"].(map[string]any))
		})
	}
	const olu = "event.observation.observedLoadingUnit."
	tests := []struct {
		name     string
		body     any
		ctype    string
		wantCode int
		wantMsgs []string
	}{
		{name: "valid", body: report(x1, "GATE_IN"), wantCode: 202},
		{name: "unknown type", body: report(x1, "CUSTOMS_CLEARED"), wantCode: 202},
		{name: "only the event", body: map[string]any{"event": map[string]any{"timestamp": "2025-03-14T09:00:00Z", "type": "ARRIVED"}}, wantCode: 202},
		{name: "missing event", body: map[string]any{"order": map[string]any{"orderId": "1", "positionId": "2"}}, wantCode: 400,
			wantMsgs: []string{"event is missing"}},
		{name: "missing timestamp", body: ev(func(_, ev map[string]any) { delete(ev, "timestamp") }), wantCode: 400,
			wantMsgs: []string{"event.timestamp is missing"}},
		{name: "bad timestamp", body: ev(func(_, ev map[string]any) { ev["timestamp"] = "yesterday" }), wantCode: 400,
			wantMsgs: []string{"event.timestamp must be an RFC 3339 date-time"}},
		{name: "missing type", body: ev(func(_, ev map[string]any) { delete(ev, "type") }), wantCode: 400,
			wantMsgs: []string{"event.type is missing"}},
		{name: "type not a string", body: ev(func(_, ev map[string]any) { ev["type"] = 3 }), wantCode: 400,
			wantMsgs: []string{"event.type must be a string"}},
		{name: "order without ids", body: ev(func(r, _ map[string]any) { r["order"] = map[string]any{} }), wantCode: 400,
			wantMsgs: []string{"order.orderId is missing", "order.positionId is missing"}},
		{name: "101 seals", body: ev(func(_, ev map[string]any) {
			ev["observation"].(map[string]any)["observedLoadingUnit"].(map[string]any)["seals"] = manySeals(101)
		}), wantCode: 400, wantMsgs: []string{"event.observation.observedLoadingUnit.seals must have at most 100 items"}},
		{name: "wrong JSON types", body: ev(func(r, ev map[string]any) {
			obs := ev["observation"].(map[string]any)
			obs["observedLoadingUnit"].(map[string]any)["weight"] = map[string]any{"gross": "heavy"}
			obs["location"] = "Duisburg"
			r["reporter"] = 5
		}), wantCode: 400, wantMsgs: []string{"event.observation.observedLoadingUnit.weight.gross must be a number",
			"event.observation.location must be an object", "reporter must be an object"}},
		{name: "every enumeration value and int32 integers", body: obs(func(mot, lu, unit, loc map[string]any) {
			mot["modeOfTransport"], unit["containerClass"], unit["identification"] = "UNKNOWN", "NON_MOBILE", "SOC"
			lu["loadingState"], lu["condition"], loc["type"] = "EMPTY", "DAMAGED", "SEAPORT_TERMINAL"
			lu["seals"] = []any{map[string]any{"type": "UNKNOWN"}, map[string]any{"type": "CUSTOMS"}}
			lu["oversize"] = map[string]any{"excessLengthFront": 0, "excessLengthBack": json.Number("12.0"),
				"excessWidthRight": math.MaxInt32, "excessWidthLeft": math.MinInt32, "excessHeight": json.Number("3e1")}
		}), wantCode: 202},
		// Only fields marked nullable may be null: identification is (a string or null), modeOfTransport,
		// loadingState and condition are not; the OpenAPI document says so.
		{name: "null nullable enumeration", body: obs(func(_, _, unit, _ map[string]any) { unit["identification"] = nil }), wantCode: 202},
		{name: "null nullable objects", body: obs(func(mot, lu, _, _ map[string]any) {
			mot["truck"], mot["barge"], mot["train"], lu["observedTemperature"] = nil, nil, nil, nil
		}), wantCode: 202},
		{name: "null enumerations not nullable", body: obs(func(mot, lu, _, _ map[string]any) {
			mot["modeOfTransport"], lu["loadingState"], lu["condition"] = nil, nil, nil
		}), wantCode: 400, wantMsgs: []string{
			olu + "condition must not be null",
			olu + "loadingState must not be null",
			"event.observation.observedMeansOfTransport.modeOfTransport must not be null"}},
		{name: "values outside the enumerations", body: obs(func(mot, lu, unit, loc map[string]any) {
			mot["modeOfTransport"], unit["containerClass"], unit["identification"] = "PLANE", "BOX", "bic"
			lu["loadingState"], lu["condition"], loc["type"] = "HALF", "BROKEN", "AIRPORT"
			lu["seals"] = []any{map[string]any{"type": "WAX", "number": "S1"}}
		}), wantCode: 400, wantMsgs: []string{
			"event.observation.observedMeansOfTransport.modeOfTransport must be one of BARGE, RAIL, TRUCK, UNKNOWN",
			olu + "loadingUnit.containerClass must be one of CONTAINER, SWAP_BODY, TRAILER, VEHICLE, MAFI, NON_MOBILE, OTHER",
			olu + "loadingUnit.identification must be one of BIC, ILU, SOC, OTHER",
			olu + "loadingState must be one of FULL, EMPTY, UNKNOWN",
			olu + "condition must be one of OK, DAMAGED, UNKNOWN",
			olu + "seals[0].type must be one of OPERATOR, CUSTOMS, UNKNOWN",
			"event.observation.location.type must be one of ORGANISATION,"}},
		{name: "missing containerClass", body: obs(func(_, _, unit, _ map[string]any) { delete(unit, "containerClass") }), wantCode: 400,
			wantMsgs: []string{olu + "loadingUnit.containerClass is missing"}},
		{name: "location without designation", body: obs(func(_, _, _, loc map[string]any) { delete(loc, "designation") }), wantCode: 400,
			wantMsgs: []string{"event.observation.location.designation is missing"}},
		{name: "null designation", body: obs(func(_, _, _, loc map[string]any) { loc["designation"] = nil }), wantCode: 400,
			wantMsgs: []string{"event.observation.location.designation is missing"}},
		{name: "blank designation", body: obs(func(_, _, _, loc map[string]any) { loc["designation"] = " " }), wantCode: 400,
			wantMsgs: []string{"event.observation.location.designation must not be empty"}},
		{name: "geoLocation at the bounds", body: obs(func(_, _, _, loc map[string]any) {
			loc["geoLocation"] = map[string]any{"coordinates": map[string]any{"latitude": -90, "longitude": json.Number("180.0")}}
		}), wantCode: 202},
		{name: "geoLocation without coordinates", body: obs(func(_, _, _, loc map[string]any) {
			loc["geoLocation"] = map[string]any{"coordinates": nil}
		}), wantCode: 202},
		{name: "geoLocation not an object", body: obs(func(_, _, _, loc map[string]any) { loc["geoLocation"] = "51.4,6.7" }), wantCode: 400,
			wantMsgs: []string{"event.observation.location.geoLocation must be an object"}},
		{name: "coordinates not an object", body: obs(func(_, _, _, loc map[string]any) {
			loc["geoLocation"] = map[string]any{"coordinates": []any{51.4, 6.7}}
		}), wantCode: 400, wantMsgs: []string{"event.observation.location.geoLocation.coordinates must be an object"}},
		{name: "coordinates not numbers", body: obs(func(_, _, _, loc map[string]any) {
			loc["geoLocation"] = map[string]any{"coordinates": map[string]any{"latitude": "51.4", "longitude": true}}
		}), wantCode: 400, wantMsgs: []string{
			"event.observation.location.geoLocation.coordinates.latitude must be a number",
			"event.observation.location.geoLocation.coordinates.longitude must be a number"}},
		{name: "coordinates out of range", body: obs(func(_, _, _, loc map[string]any) {
			loc["geoLocation"] = map[string]any{"coordinates": map[string]any{"latitude": 90.5, "longitude": -180.01}}
		}), wantCode: 400, wantMsgs: []string{
			"event.observation.location.geoLocation.coordinates.latitude must be from -90 to 90",
			"event.observation.location.geoLocation.coordinates.longitude must be from -180 to 180"}},
		{name: "coordinates beyond a double", body: obs(func(_, _, _, loc map[string]any) {
			loc["geoLocation"] = map[string]any{"coordinates": map[string]any{"latitude": json.Number("1e400"), "longitude": 6.7}}
		}), wantCode: 400, wantMsgs: []string{
			"event.observation.location.geoLocation.coordinates.latitude must be a number within the range of a double"}},
		{name: "temperature and humidity", body: obs(func(_, lu, _, _ map[string]any) {
			lu["observedTemperature"] = map[string]any{"temperature": -18.5, "humidity": json.Number("1.7976931348623157e308")}
		}), wantCode: 202},
		{name: "temperature and humidity beyond a double", body: obs(func(_, lu, _, _ map[string]any) {
			lu["observedTemperature"] = map[string]any{"temperature": json.Number("-1e309"), "humidity": "85"}
		}), wantCode: 400, wantMsgs: []string{
			olu + "observedTemperature.temperature must be a number within the range of a double",
			olu + "observedTemperature.humidity must be a number"}},
		{name: "country codes", body: obs(func(_, _, _, loc map[string]any) {
			loc["address"] = map[string]any{"city": "Duisburg", "country": map[string]any{"name": "Germany", "code": "DE"}}
		}), wantCode: 202},
		{name: "country codes not of two characters", body: ev(func(r, ev map[string]any) {
			loc := ev["observation"].(map[string]any)["location"].(map[string]any)
			loc["address"] = map[string]any{"country": map[string]any{"name": "Germany", "code": "DEU"}}
			r["reporter"].(map[string]any)["address"] = map[string]any{"country": map[string]any{"code": ""}}
		}), wantCode: 400, wantMsgs: []string{
			"event.observation.location.address.country.code must be a two-character UN country code",
			"reporter.address.country.code must be a two-character UN country code"}},
		{name: "oversize not int32", body: obs(func(_, lu, _, _ map[string]any) {
			lu["oversize"] = map[string]any{"excessLengthFront": 1.5, "excessLengthBack": "10", "excessWidthRight": int64(math.MaxInt32) + 1,
				"excessWidthLeft": json.Number("-1e300"), "excessHeight": json.Number("45e-1")}
		}), wantCode: 400, wantMsgs: []string{
			olu + "oversize.excessLengthFront must be an integer",
			olu + "oversize.excessLengthBack must be an integer",
			olu + "oversize.excessWidthRight must be an integer from -2147483648 to 2147483647",
			olu + "oversize.excessWidthLeft must be an integer from -2147483648 to 2147483647",
			olu + "oversize.excessHeight must be an integer"}},
		{name: "not JSON", body: "{]", wantCode: 400, wantMsgs: []string{"body is not valid JSON"}},
		{name: "not declared JSON", body: report(x1, "GATE_IN"), ctype: "text/plain", wantCode: 415,
			wantMsgs: []string{"Content-Type must be application/json"}},
		{name: "no Content-Type", body: report(x1, "GATE_IN"), ctype: "", wantCode: 415},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := []string{"Content-Type", tt.ctype}
			if tt.ctype == "" && tt.name != "no Content-Type" {
				hdr = nil
			}
			r := e.do("POST", "/tracking/events", tok, tt.body, hdr...)
			if r.Status != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", r.Status, tt.wantCode, r.Body)
			}
			msgs := r.messages(t)
			if tt.wantMsgs == nil && tt.wantCode != 202 {
				return
			}
			if len(msgs) != len(tt.wantMsgs) {
				t.Fatalf("messages %q, want %q", msgs, tt.wantMsgs)
			}
			for i, w := range tt.wantMsgs {
				if !strings.HasPrefix(msgs[i], w) {
					t.Errorf("message %q does not start with %q", msgs[i], w)
				}
			}
		})
	}
	if st := e.sim.Stats(); st.ReportCalls != len(tests) || st.ReportsAccepted != 10 {
		t.Errorf("report calls %d accepted %d", st.ReportCalls, st.ReportsAccepted)
	}
}

// event.timestamp is a date-time: RFC 3339 section 5.6, as the OpenAPI format defines it.
func TestReportTimestampSyntax(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	for _, tt := range []struct {
		ts   string
		want int
	}{
		{"2025-03-14T10:15:00Z", 202},
		{"2025-03-14T10:15:00.123456789123Z", 202},
		{"2025-03-14T10:15:00+00:00", 202},
		{"2025-03-14T10:15:00-00:00", 202},
		{"2025-03-14T10:15:00+23:59", 202},
		{"2025-03-14T10:15:00-05:30", 202},
		{"2024-02-29T23:59:59.5Z", 202},
		{"2025-03-14T10:15:00,5Z", 400}, // a comma before the fraction is ISO 8601, not RFC 3339
		{"2025-03-14T10:15:00+24:00", 400},
		{"2025-03-14T10:15:00+01:60", 400},
		{"2025-03-14T10:15:00+0100", 400},
		{"2025-03-14T10:15:00.Z", 400},
		{"2025-03-14T10:15:00", 400},
		{"2025-03-14 10:15:00Z", 400},
		{"2025-02-29T10:15:00Z", 400},
		{"2025-03-14T24:00:00Z", 400},
		{"2025-03-14", 400},
	} {
		body := map[string]any{"event": map[string]any{"timestamp": tt.ts, "type": "GATE_IN"}}
		r := e.do("POST", "/tracking/events", tok, body)
		if r.Status != tt.want {
			t.Errorf("timestamp %s: %d %s, want %d", tt.ts, r.Status, r.Body, tt.want)
			continue
		}
		if m := r.messages(t); tt.want == 400 && (len(m) != 1 || m[0] != "event.timestamp must be an RFC 3339 date-time") {
			t.Errorf("timestamp %s: messages %q", tt.ts, m)
		}
	}
}

// The timestamp is "the exact time of the event, in UTC": one with a non-zero offset is
// accepted and the event carries the same instant in UTC, the fraction as written; a UTC one is kept.
func TestReportTimestampInUTC(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	o := e.sim.TrackedOrders("demo")[7]
	tests := []struct{ sent, want string }{
		{"2025-03-14T10:15:00Z", "2025-03-14T10:15:00Z"},
		{"2025-03-14T10:15:00.000+00:00", "2025-03-14T10:15:00.000+00:00"},
		{"2025-03-14T10:15:00-00:00", "2025-03-14T10:15:00-00:00"},
		{"2025-03-14T10:15:00.50+01:00", "2025-03-14T09:15:00.50Z"},
		{"2025-03-14T04:45:00-05:30", "2025-03-14T10:15:00Z"},
		{"2025-01-01T00:30:00.123456789123+01:00", "2024-12-31T23:30:00.123456789123Z"},
	}
	for _, tt := range tests {
		body := report(o, "GATE_IN")
		body["event"].(map[string]any)["timestamp"] = tt.sent
		if r := e.do("POST", "/tracking/events", tok, body); r.Status != 202 {
			t.Fatalf("report at %s: %d %s", tt.sent, r.Status, r.Body)
		}
	}
	r := e.do("GET", "/tracking?orderId="+o.OrderID+"&positionId="+o.PositionID, tok, nil)
	var tu struct{ Events []struct{ Timestamp string } }
	if err := json.Unmarshal(r.Body, &tu); r.Status != 200 || err != nil || len(tu.Events) != len(tests) {
		t.Fatalf("query: %d %s", r.Status, r.Body)
	}
	rd := newSSEReader(t, e.openStream(tok, ""))
	for i, tt := range tests {
		if got := tu.Events[i].Timestamp; got != tt.want {
			t.Errorf("queryTracking: sent %s, got %s, want %s", tt.sent, got, tt.want)
		}
		var data struct{ Timestamp string }
		if ev := rd.next(); json.Unmarshal([]byte(ev.Data()), &data) != nil || data.Timestamp != tt.want {
			t.Errorf("stream: sent %s, got %s, want %s", tt.sent, ev.Data(), tt.want)
		}
	}
	for _, ts := range []string{"0000-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00"} {
		body := report(o, "GATE_IN")
		body["event"].(map[string]any)["timestamp"] = ts
		r := e.do("POST", "/tracking/events", tok, body)
		if m := r.messages(t); r.Status != 400 || len(m) != 1 || m[0] != "event.timestamp must be in the years 0000 to 9999 in UTC" {
			t.Errorf("report at %s, not to be written in UTC: %d %s", ts, r.Status, r.Body)
		}
	}
	if got := e.sim.Reports("demo")[3].Body; !bytes.Contains(got, []byte(`"2025-03-14T10:15:00.50+01:00"`)) {
		t.Errorf("the recorded report is not the body as received: %s", got)
	}
}

func TestReportFlowsToStreamAndQuery(t *testing.T) {
	e := newEnv(t, Options{Heartbeat: -1})
	tok := e.login("demo")
	rd := newSSEReader(t, e.openStream(tok, ""))

	x42 := e.sim.TrackedOrders("demo")[2]
	body := report(x42, "GATE_OUT")
	r := e.do("POST", "/tracking/events", tok, body, "Idempotency-Key", "k-1")
	if r.Status != 202 || string(bytes.TrimSpace(r.Body)) != `{"messages":[]}` {
		t.Fatalf("report: %d %s", r.Status, r.Body)
	}
	ev := rd.next()
	if ev.Id() != EventID(1) || ev.Event() != "GATE_OUT" {
		t.Errorf("streamed id %q event %q", ev.Id(), ev.Event())
	}
	var data map[string]any
	if err := json.Unmarshal([]byte(ev.Data()), &data); err != nil {
		t.Fatalf("data %q: %v", ev.Data(), err)
	}
	// The report's timestamp 2025-03-14T10:15:00.5+01:00, in UTC.
	if data["id"] != EventID(1) || data["type"] != "GATE_OUT" || data["timestamp"] != "2025-03-14T09:15:00.5Z" {
		t.Errorf("data %s", ev.Data())
	}
	if !strings.Contains(ev.Data(), "Duisburg <Gate>") {
		t.Errorf("data is HTML-escaped or lost the location: %s", ev.Data())
	}

	// A retry with the same key is accepted again without a second event; the next report comes next.
	if r := e.do("POST", "/tracking/events", tok, body, "Idempotency-Key", "k-1"); r.Status != 202 {
		t.Fatalf("repeat: %d", r.Status)
	}
	if r := e.do("POST", "/tracking/events", tok, report(x42, "GATE_IN"), "Idempotency-Key", "k-2"); r.Status != 202 {
		t.Fatalf("second report: %d", r.Status)
	}
	if ev := rd.next(); ev.Id() != EventID(2) || ev.Event() != "GATE_IN" {
		t.Errorf("after the repeat: id %q event %q, want the second report", ev.Id(), ev.Event())
	}
	reps := e.sim.Reports("demo")
	if len(reps) != 2 || reps[0].IdempotencyKey != "k-1" || reps[0].EventID != EventID(1) || reps[1].EventID != EventID(2) {
		t.Fatalf("reports %+v", reps)
	}
	if want, _ := json.Marshal(body); !bytes.Equal(reps[0].Body, want) || reps[0].Time.IsZero() {
		t.Errorf("recorded body %s", reps[0].Body)
	}
	if st := e.sim.Stats(); st.ReportDuplicates != 1 || st.ReportsAccepted != 2 {
		t.Errorf("duplicates %d accepted %d", st.ReportDuplicates, st.ReportsAccepted)
	}
	// The same key of another user is that user's own.
	other := e.login("other")
	otherBody := report(e.sim.TrackedOrders("other")[2], "GATE_OUT")
	if r := e.do("POST", "/tracking/events", other, otherBody, "Idempotency-Key", "k-1"); r.Status != 202 || len(e.sim.Reports("other")) != 1 {
		t.Errorf("other user's report with the same key: %d, %d reports", r.Status, len(e.sim.Reports("other")))
	}

	// Operation queryTracking returns both events of the reported order, oldest first, with its unit.
	wantUnit := e.sim.generator(e.sim.user("demo")).ships[2].unit
	for _, q := range []url.Values{
		{"orderId": {x42.OrderID}, "positionId": {x42.PositionID}},
		{"clientOrderReference": {x42.ClientOrderReference}, "clientPositionReference": {x42.ClientPositionReference}},
	} {
		r = e.do("GET", "/tracking?"+q.Encode(), tok, nil)
		var tu struct {
			ObservedUntil string
			Order         TrackingOrder
			LoadingUnit   LoadingUnitTracking
			Events        []map[string]any
		}
		if err := json.Unmarshal(r.Body, &tu); r.Status != 200 || err != nil {
			t.Fatalf("query %s: %d %s", q, r.Status, r.Body)
		}
		if tu.Order.OrderID != x42.OrderID || tu.Order.ClientPositionReference != x42.ClientPositionReference || len(tu.Events) != 2 ||
			tu.Events[0]["type"] != "GATE_OUT" || tu.Events[0]["timestamp"] != "2025-03-14T09:15:00.5Z" || tu.Events[1]["id"] != EventID(2) ||
			tu.LoadingUnit.Number == nil || *tu.LoadingUnit.Number != *wantUnit.Number || tu.ObservedUntil == "" {
			t.Errorf("tracked unit %s", r.Body)
		}
	}
	// Each user sees only their own reports.
	o2 := e.sim.TrackedOrders("other")[2]
	r = e.do("GET", "/tracking?orderId="+o2.OrderID+"&positionId="+o2.PositionID, other, nil)
	var tu struct{ Events []json.RawMessage }
	if err := json.Unmarshal(r.Body, &tu); r.Status != 200 || err != nil || len(tu.Events) != 1 {
		t.Errorf("other's query: %d %s", r.Status, r.Body)
	}
	third := e.do("GET", "/tracking?orderId="+x42.OrderID+"&positionId=30", tok, nil)
	if third.Status != 404 {
		t.Errorf("unknown position: %d", third.Status)
	}
}

// The provider's only permission rule is the ownership of orders by the current user: a user reports
// events only for their own tracked orders, and those events reach only the owner's stream and
// queryTracking.
func TestReportOwnership(t *testing.T) {
	e := newEnv(t, Options{})
	demo, other := e.login("demo"), e.login("other")
	own, foreign := e.sim.TrackedOrders("demo")[4], e.sim.TrackedOrders("other")[4]
	withPosition := func(o TrackingOrder, pos string) TrackingOrder { o.PositionID = pos; return o }
	tests := []struct {
		name     string
		body     map[string]any
		wantCode int
		wantMsg  string
	}{
		{"own order", report(own, "GATE_IN"), 202, ""},
		{"another user's order", report(foreign, "GATE_IN"), 403,
			"Order " + foreign.OrderID + " position " + foreign.PositionID + " belongs to another client"},
		{"unknown order", report(TrackingOrder{OrderID: "TO-NOPE", PositionID: "10"}, "GATE_IN"), 404,
			"No tracked unit for orderId TO-NOPE and positionId 10"},
		{"unknown position of an own order", report(withPosition(own, "99"), "GATE_IN"), 404,
			"No tracked unit for orderId " + own.OrderID + " and positionId 99"},
		{"no order", map[string]any{"event": map[string]any{"timestamp": "2025-03-14T09:00:00Z", "type": "ARRIVED"}}, 202, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("POST", "/tracking/events", demo, tt.body)
			if r.Status != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", r.Status, tt.wantCode, r.Body)
			}
			if m := r.messages(t); tt.wantMsg != "" && (len(m) != 1 || m[0] != tt.wantMsg) {
				t.Errorf("messages %q, want [%q]", m, tt.wantMsg)
			}
		})
	}
	if n := len(e.sim.Reports("demo")); n != 2 {
		t.Errorf("demo has %d accepted reports, want 2", n)
	}
	if n := len(e.sim.Reports("other")); n != 0 {
		t.Errorf("other has %d accepted reports, want 0", n)
	}
	events := func(tok string, o TrackingOrder) int {
		t.Helper()
		r := e.do("GET", "/tracking?orderId="+o.OrderID+"&positionId="+o.PositionID, tok, nil)
		var tu struct{ Events []json.RawMessage }
		if err := json.Unmarshal(r.Body, &tu); r.Status != 200 || err != nil {
			t.Fatalf("query: %d %s", r.Status, r.Body)
		}
		return len(tu.Events)
	}
	if n := events(demo, own); n != 1 {
		t.Errorf("demo's order shows %d events, want the one reported", n)
	}
	if n := events(other, foreign); n != 0 {
		t.Errorf("other's order shows %d events, want none", n)
	}
	// The owner's stream carries the two accepted reports and nothing else; the other user's carries none.
	rd := newSSEReader(t, e.openStream(demo, ""))
	if ev := rd.next(); ev.Id() != EventID(1) || ev.Event() != "GATE_IN" {
		t.Errorf("demo's first event %q %q", ev.Id(), ev.Event())
	}
	if ev := rd.next(); ev.Id() != EventID(2) || ev.Event() != "ARRIVED" {
		t.Errorf("demo's second event %q %q", ev.Id(), ev.Event())
	}
	e.sim.Inject("other", "marker", "MARKER", []byte("{}"))
	if ev := newSSEReader(t, e.openStream(other, "")).next(); ev.Id() != "marker" {
		t.Errorf("other's stream starts with %q, want only the injected marker", ev.Id())
	}
}

// A reported event belongs to the unit its orderId and positionId name, so every query that finds the
// unit's events finds it (a report enriches the query), the client reference pair included, whatever client
// references the report itself carried.
func TestReportedEventFoundByEveryQuery(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	o := e.sim.TrackedOrders("demo")[5]
	refs := []struct {
		name       string
		order, pos any // the report's client references; nil: absent
	}{
		{"the unit's client references", o.ClientOrderReference, o.ClientPositionReference},
		{"no client references", nil, nil},
		{"other client references", "PO-OTHER", "PO-OTHER/9"},
	}
	for i, r := range refs {
		body := report(o, "GATE_IN")
		ord := body["order"].(map[string]any)
		ord["clientOrderReference"], ord["clientPositionReference"] = r.order, r.pos
		if r.order == nil {
			delete(ord, "clientOrderReference")
			delete(ord, "clientPositionReference")
		}
		body["event"].(map[string]any)["type"] = fmt.Sprintf("T%d", i)
		if res := e.do("POST", "/tracking/events", tok, body); res.Status != 202 {
			t.Fatalf("report with %s: %d %s", r.name, res.Status, res.Body)
		}
	}
	for _, q := range []url.Values{
		{"orderId": {o.OrderID}, "positionId": {o.PositionID}},
		{"clientOrderReference": {o.ClientOrderReference}, "clientPositionReference": {o.ClientPositionReference}},
		{"orderId": {o.OrderID}, "positionId": {o.PositionID},
			"clientOrderReference": {o.ClientOrderReference}, "clientPositionReference": {o.ClientPositionReference}},
	} {
		r := e.do("GET", "/tracking?"+q.Encode(), tok, nil)
		var tu struct{ Events []struct{ Type string } }
		if err := json.Unmarshal(r.Body, &tu); r.Status != 200 || err != nil {
			t.Fatalf("query %s: %d %s", q.Encode(), r.Status, r.Body)
		}
		var types []string
		for _, ev := range tu.Events {
			types = append(types, ev.Type)
		}
		if got := strings.Join(types, ","); got != "T0,T1,T2" {
			t.Errorf("query %s: events %s, want the three reported (T0,T1,T2)", q.Encode(), got)
		}
	}
	// The references the report carried name no unit of their own.
	if r := e.do("GET", "/tracking?clientOrderReference=PO-OTHER&clientPositionReference=PO-OTHER/9", tok, nil); r.Status != 404 {
		t.Errorf("query by the report's own other references: %d %s", r.Status, r.Body)
	}
}

// observedUntil is the point in time until which events are included; later events are not part of the
// response. Reports may carry any timestamp, later ones too.
func TestTrackingObservedUntil(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	o := e.sim.TrackedOrders("demo")[6]
	soon := time.Now().Add(700 * time.Millisecond).UTC()
	for _, r := range []struct{ typ, ts string }{ // in log order
		{"FUTURE", time.Now().Add(time.Hour).Format(time.RFC3339)},
		{"PAST", "2025-03-14T10:15:00.5+01:00"},
		{"LATER", "2999-01-01T00:00:00Z"},
		{"SOON", soon.Format(time.RFC3339Nano)},
	} {
		typ := r.typ
		body := report(o, typ)
		body["event"].(map[string]any)["timestamp"] = r.ts
		if r := e.do("POST", "/tracking/events", tok, body); r.Status != 202 {
			t.Fatalf("report %s: %d %s", typ, r.Status, r.Body)
		}
	}
	query := func() (until time.Time, types []string) {
		t.Helper()
		r := e.do("GET", "/tracking?orderId="+o.OrderID+"&positionId="+o.PositionID, tok, nil)
		var tu struct {
			ObservedUntil time.Time
			Events        []struct {
				Type      string
				Timestamp time.Time
			}
		}
		if err := json.Unmarshal(r.Body, &tu); r.Status != 200 || err != nil {
			t.Fatalf("query: %d %s", r.Status, r.Body)
		}
		for _, ev := range tu.Events {
			if ev.Timestamp.After(tu.ObservedUntil) {
				t.Errorf("event %s at %v is later than observedUntil %v", ev.Type, ev.Timestamp, tu.ObservedUntil)
			}
			types = append(types, ev.Type)
		}
		return tu.ObservedUntil, types
	}
	until, types := query()
	want := "PAST"
	if !soon.After(until) {
		want = "PAST,SOON" // a slow machine
	}
	if got := strings.Join(types, ","); got != want {
		t.Errorf("events %s at observedUntil %v, want %s", got, until, want)
	}
	waitFor(t, "the SOON event to be included", func() bool {
		_, types := query()
		return strings.Join(types, ",") == "PAST,SOON"
	})
}

func TestTrackingQueryParameters(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	orders := e.sim.TrackedOrders("demo")
	if len(orders) != numShipments {
		t.Fatalf("%d tracked orders", len(orders))
	}
	o := orders[3]
	foreign := e.sim.TrackedOrders("other")[3]
	tests := []struct {
		name     string
		query    url.Values
		wantCode int
		wantMsgs []string
	}{
		{"order pair", url.Values{"orderId": {o.OrderID}, "positionId": {o.PositionID}}, 200, nil},
		{"client pair", url.Values{"clientOrderReference": {o.ClientOrderReference}, "clientPositionReference": {o.ClientPositionReference}}, 200, nil},
		{"both pairs", url.Values{"orderId": {o.OrderID}, "positionId": {o.PositionID},
			"clientOrderReference": {o.ClientOrderReference}, "clientPositionReference": {o.ClientPositionReference}}, 200, nil},
		{"pairs of different units", url.Values{"orderId": {o.OrderID}, "positionId": {o.PositionID},
			"clientOrderReference": {orders[4].ClientOrderReference}, "clientPositionReference": {orders[4].ClientPositionReference}}, 404, nil},
		{"none", url.Values{}, 400, []string{"either orderId and positionId or clientOrderReference and clientPositionReference must be given"}},
		{"lone orderId", url.Values{"orderId": {o.OrderID}}, 400, []string{"orderId and positionId must be given together"}},
		{"lone positionId", url.Values{"positionId": {"10"}}, 400, []string{"orderId and positionId must be given together"}},
		{"lone client reference", url.Values{"clientPositionReference": {"x"}}, 400, []string{"clientOrderReference and clientPositionReference must be given together"}},
		{"two lone halves", url.Values{"orderId": {"1"}, "clientOrderReference": {"x"}}, 400, []string{
			"orderId and positionId must be given together", "clientOrderReference and clientPositionReference must be given together"}},
		{"unknown", url.Values{"orderId": {"nope"}, "positionId": {"10"}}, 404, []string{"No tracked unit for orderId nope and positionId 10"}},
		{"another user's order pair", url.Values{"orderId": {foreign.OrderID}, "positionId": {foreign.PositionID}}, 403,
			[]string{"The tracked unit of orderId " + foreign.OrderID + " and positionId " + foreign.PositionID + " belongs to another client"}},
		{"another user's client pair", url.Values{"clientOrderReference": {foreign.ClientOrderReference}, "clientPositionReference": {foreign.ClientPositionReference}}, 403,
			[]string{"The tracked unit of clientOrderReference " + foreign.ClientOrderReference + " and clientPositionReference " +
				foreign.ClientPositionReference + " belongs to another client"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", "/tracking?"+tt.query.Encode(), tok, nil)
			if r.Status != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", r.Status, tt.wantCode, r.Body)
			}
			if r.Status == 200 {
				var tu struct {
					Order       TrackingOrder
					LoadingUnit LoadingUnitTracking
					Events      []json.RawMessage
				}
				if err := json.Unmarshal(r.Body, &tu); err != nil || tu.Order.OrderID != o.OrderID || tu.Order.Client == nil ||
					tu.LoadingUnit.ContainerClass == "" || tu.Events == nil || len(tu.Events) != 0 {
					t.Errorf("tracked unit %s", r.Body)
				}
				return
			}
			if msgs := r.messages(t); tt.wantMsgs != nil && strings.Join(msgs, "|") != strings.Join(tt.wantMsgs, "|") {
				t.Errorf("messages %q, want %q", msgs, tt.wantMsgs)
			}
		})
	}
}

func TestTrackingQueryGeneratedEvents(t *testing.T) {
	const n = 2000
	e := newEnv(t, Options{EventRate: -1, EventLimit: n})
	tok := e.login("demo")
	rd := newSSEReader(t, e.openStream(tok, ""))
	for i := 1; i <= n; i++ {
		if ev := rd.next(); ev.Id() != EventID(i) {
			t.Fatalf("event %d has id %q", i, ev.Id())
		}
	}
	o := e.sim.TrackedOrders("demo")[5]
	r := e.do("GET", "/tracking?orderId="+o.OrderID+"&positionId="+o.PositionID, tok, nil)
	var tu struct{ Events []json.RawMessage }
	if err := json.Unmarshal(r.Body, &tu); r.Status != 200 || err != nil {
		t.Fatalf("query: %d %s", r.Status, r.Body)
	}
	if len(tu.Events) != maxTrackedEvents {
		t.Fatalf("%d events, want %d", len(tu.Events), maxTrackedEvents)
	}
	// The 100 most recent events of position 5 are k = 5 + 16*i for the largest i below n, oldest first.
	lastK := int64(n-1) - (int64(n-1)-5)%numShipments
	for i, raw := range tu.Events {
		k := lastK - int64(numShipments*(maxTrackedEvents-1-i))
		_, want := e.sim.GeneratedEvent("demo", int(k+1))
		if !bytes.Equal(raw, want) {
			t.Fatalf("event %d: %s, want %s", i, raw, want)
		}
	}
}

func TestReportFaults(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	f1 := e.sim.TrackedOrders("demo")[0]
	body := report(f1, "ARRIVED")

	e.sim.SetFaults(Faults{Report429: true, RetryAfter: 2_000_000_000})
	r := e.do("POST", "/tracking/events", tok, body)
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "2" {
		t.Errorf("Report429: %d Retry-After %q", r.Status, r.Header.Get("Retry-After"))
	}
	r.messages(t)

	e.sim.SetFaults(Faults{ReportErrorRate: 1})
	for range 8 {
		if r := e.do("POST", "/tracking/events", tok, body); r.Status < 500 || r.Status > 504 {
			t.Errorf("ReportErrorRate 1: %d", r.Status)
		}
	}

	var mu sync.Mutex
	var seen [][]byte
	e.sim.SetFaults(Faults{RejectReports: func(b []byte) (int, []string, bool) {
		mu.Lock()
		seen = append(seen, b)
		mu.Unlock()
		if bytes.Contains(b, []byte("POISON")) {
			return http.StatusUnprocessableEntity, []string{"event cannot be processed"}, true
		}
		return 0, nil, false
	}})
	r = e.do("POST", "/tracking/events", tok, report(f1, "POISON"))
	if r.Status != http.StatusUnprocessableEntity || r.messages(t)[0] != "event cannot be processed" {
		t.Errorf("rejected: %d %s", r.Status, r.Body)
	}
	if r := e.do("POST", "/tracking/events", tok, body); r.Status != 202 {
		t.Errorf("not rejected: %d %s", r.Status, r.Body)
	}
	mu.Lock()
	if len(seen) != 2 {
		t.Errorf("hook saw %d bodies", len(seen))
	}
	mu.Unlock()

	e.sim.SetFaults(Faults{})
	if st := e.sim.Stats(); st.ReportCalls != 11 || st.ReportsAccepted != 1 || st.InjectedErrors != 9 {
		t.Errorf("stats %+v", st)
	}
	if len(e.sim.Reports("demo")) != 1 {
		t.Errorf("reports %d", len(e.sim.Reports("demo")))
	}
}
