package sim

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// validOrder returns a valid BookingOrder body as a map, for tests to alter.
func validOrder() map[string]any {
	return map[string]any{
		"terminalId": "L10001",
		"action":     "PICK_UP",
		"reference":  "REF-4711",
		"unit": map[string]any{
			"loadingState":             "FULL",
			"isoCode":                  "45G1",
			"number":                   "MSKU0980641",
			"dangerousGoodsIndication": "NOT_DANGEROUS",
			"condition":                "OK",
			"seals":                    []any{map[string]any{"type": "CUSTOMS", "number": "DE123"}},
		},
		"clientContext": map[string]any{
			"plannedDate":  map[string]any{"date": "2025-03-14", "timeOfDay": "EARLY"},
			"internalNote": `A-1/2#3\x`,
		},
		"someFutureField": true,
	}
}

// edit returns validOrder changed by f.
func edit(f func(o, unit, cc map[string]any)) map[string]any {
	o := validOrder()
	f(o, o["unit"].(map[string]any), o["clientContext"].(map[string]any))
	return o
}

func manySeals(n int) []any {
	s := make([]any, n)
	for i := range s {
		s[i] = map[string]any{"type": "OPERATOR", "number": "S"}
	}
	return s
}

func TestCreateOrderValidation(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	tests := []struct {
		name     string
		body     any
		ctype    string
		wantCode int
		wantMsgs []string
	}{
		{name: "valid", body: validOrder(), wantCode: 201},
		{name: "handlingCode instead of isoCode", body: edit(func(_, u, _ map[string]any) {
			delete(u, "isoCode")
			u["handlingCode"] = "CT45"
		}), wantCode: 201},
		{name: "no client context", body: edit(func(o, _, _ map[string]any) { o["clientContext"] = nil }), wantCode: 201},
		{name: "no planned date", body: edit(func(_, _, cc map[string]any) { cc["plannedDate"] = nil }), wantCode: 201},
		{name: "100 seals", body: edit(func(_, u, _ map[string]any) { u["seals"] = manySeals(100) }), wantCode: 201},
		{name: "missing terminalId", body: edit(func(o, _, _ map[string]any) { delete(o, "terminalId") }),
			wantCode: 400, wantMsgs: []string{"terminalId is missing"}},
		{name: "terminal of the wrong type", body: edit(func(o, _, _ map[string]any) { o["terminalId"] = "L20001" }),
			wantCode: 400, wantMsgs: []string{`terminalId "L20001" is not the id of an ADMINISTRATIVE_TERMINAL location`}},
		{name: "unknown terminal", body: edit(func(o, _, _ map[string]any) { o["terminalId"] = "nope" }),
			wantCode: 400, wantMsgs: []string{`terminalId "nope" is not the id of an ADMINISTRATIVE_TERMINAL location`}},
		{name: "bad action", body: edit(func(o, _, _ map[string]any) { o["action"] = "THROW" }),
			wantCode: 400, wantMsgs: []string{"action must be one of PICK_UP, DROP_OFF"}},
		{name: "reference of the wrong type", body: edit(func(o, _, _ map[string]any) { o["reference"] = 17 }),
			wantCode: 400, wantMsgs: []string{"reference must be a string"}},
		{name: "empty reference", body: edit(func(o, _, _ map[string]any) { o["reference"] = " " }),
			wantCode: 400, wantMsgs: []string{"reference must not be empty"}},
		{name: "missing unit", body: edit(func(o, _, _ map[string]any) { delete(o, "unit") }),
			wantCode: 400, wantMsgs: []string{"unit is missing"}},
		{name: "unit not an object", body: edit(func(o, _, _ map[string]any) { o["unit"] = []any{} }),
			wantCode: 400, wantMsgs: []string{"unit must be an object"}},
		{name: "missing loadingState", body: edit(func(_, u, _ map[string]any) { delete(u, "loadingState") }),
			wantCode: 400, wantMsgs: []string{"unit.loadingState is missing"}},
		{name: "bad loadingState", body: edit(func(_, u, _ map[string]any) { u["loadingState"] = "HALF" }),
			wantCode: 400, wantMsgs: []string{"unit.loadingState must be one of FULL, EMPTY, UNKNOWN"}},
		{name: "neither handlingCode nor isoCode", body: edit(func(_, u, _ map[string]any) { delete(u, "isoCode"); u["handlingCode"] = nil }),
			wantCode: 400, wantMsgs: []string{"unit.handlingCode or unit.isoCode must be given"}},
		{name: "blank handlingCode and no isoCode", body: edit(func(_, u, _ map[string]any) { delete(u, "isoCode"); u["handlingCode"] = "  " }),
			wantCode: 400, wantMsgs: []string{"unit.handlingCode or unit.isoCode must be given"}},
		{name: "empty isoCode and blank handlingCode", body: edit(func(_, u, _ map[string]any) { u["isoCode"] = ""; u["handlingCode"] = "\t" }),
			wantCode: 400, wantMsgs: []string{"unit.handlingCode or unit.isoCode must be given"}},
		{name: "blank handlingCode beside an isoCode", body: edit(func(_, u, _ map[string]any) { u["handlingCode"] = " " }), wantCode: 201},
		{name: "bad dangerous goods indication", body: edit(func(_, u, _ map[string]any) { u["dangerousGoodsIndication"] = "MAYBE" }),
			wantCode: 400, wantMsgs: []string{"unit.dangerousGoodsIndication must be one of"}},
		{name: "bad condition", body: edit(func(_, u, _ map[string]any) { u["condition"] = "BROKEN" }),
			wantCode: 400, wantMsgs: []string{"unit.condition must be one of"}},
		{name: "bad seal type", body: edit(func(_, u, _ map[string]any) { u["seals"] = []any{map[string]any{"type": "WAX"}} }),
			wantCode: 400, wantMsgs: []string{"unit.seals[0].type must be one of OPERATOR, CUSTOMS, UNKNOWN"}},
		{name: "101 seals", body: edit(func(_, u, _ map[string]any) { u["seals"] = manySeals(101) }),
			wantCode: 400, wantMsgs: []string{"unit.seals must have at most 100 items"}},
		{name: "internal note too long", body: edit(func(_, _, cc map[string]any) { cc["internalNote"] = strings.Repeat("a", 21) }),
			wantCode: 400, wantMsgs: []string{"clientContext.internalNote must be at most 20 characters"}},
		{name: "internal note characters", body: edit(func(_, _, cc map[string]any) { cc["internalNote"] = "a b" }),
			wantCode: 400, wantMsgs: []string{"clientContext.internalNote may contain only"}},
		{name: "bad planned date", body: edit(func(_, _, cc map[string]any) {
			cc["plannedDate"] = map[string]any{"date": "14.03.2025", "timeOfDay": "NIGHT"}
		}), wantCode: 400, wantMsgs: []string{"clientContext.plannedDate.date must be a date", "clientContext.plannedDate.timeOfDay must be one of UNKNOWN, EARLY, MIDDAY, LATE"}},
		{name: "every problem at once", body: map[string]any{"unit": map[string]any{"seals": "none"}},
			wantCode: 400, wantMsgs: []string{"terminalId is missing", "action is missing", "reference is missing",
				"unit.loadingState is missing", "unit.handlingCode or unit.isoCode must be given", "unit.seals must be an array"}},
		{name: "not JSON", body: "{", wantCode: 400, wantMsgs: []string{"body is not valid JSON"}},
		{name: "not an object", body: "[]", wantCode: 400, wantMsgs: []string{"body must be a JSON object"}},
		{name: "not declared JSON", body: validOrder(), ctype: "text/plain", wantCode: 415, wantMsgs: []string{"Content-Type must be application/json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.ctype != "" {
				hdr = []string{"Content-Type", tt.ctype}
			}
			r := e.do("POST", "/orders", tok, tt.body, hdr...)
			if r.Status != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", r.Status, tt.wantCode, r.Body)
			}
			if tt.wantCode == 201 {
				var c struct{ ID string }
				if err := json.Unmarshal(r.Body, &c); err != nil || c.ID == "" {
					t.Errorf("created: %s", r.Body)
				}
				return
			}
			msgs := r.messages(t)
			if len(msgs) != len(tt.wantMsgs) {
				t.Fatalf("messages %q, want %d", msgs, len(tt.wantMsgs))
			}
			for i, w := range tt.wantMsgs {
				if !strings.HasPrefix(msgs[i], w) {
					t.Errorf("message %q does not start with %q", msgs[i], w)
				}
			}
		})
	}
}

func TestOrderLifecycle(t *testing.T) {
	e := newEnv(t, Options{})
	demo, other := e.login("demo"), e.login("other")

	create := func(tok string) string {
		r := e.do("POST", "/orders", tok, validOrder())
		if r.Status != 201 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		var c struct{ ID string }
		_ = json.Unmarshal(r.Body, &c)
		return c.ID
	}
	list := func(tok string) []string {
		r := e.do("GET", "/orders", tok, nil)
		var l struct{ IDs []string }
		if err := json.Unmarshal(r.Body, &l); r.Status != 200 || err != nil || l.IDs == nil {
			t.Fatalf("list: %d %s", r.Status, r.Body)
		}
		return l.IDs
	}
	a, b := create(demo), create(demo)
	c := create(other)
	if got := list(demo); !slices.Equal(got, []string{a, b}) {
		t.Errorf("demo's orders %v, want [%s %s]", got, a, b)
	}
	if got := list(other); !slices.Equal(got, []string{c}) {
		t.Errorf("other's orders %v", got)
	}

	r := e.do("GET", "/orders/"+a, demo, nil)
	var bo bookingOrder
	if err := json.Unmarshal(r.Body, &bo); r.Status != 200 || err != nil || bo.ID != a || bo.Unit.LoadingState != "FULL" ||
		bo.ClientContext == nil || *bo.ClientContext.InternalNote != `A-1/2#3\x` {
		t.Fatalf("read: %d %s", r.Status, r.Body)
	}

	upd := edit(func(o, _, _ map[string]any) { o["action"] = "DROP_OFF" })
	tests := []struct {
		name     string
		method   string
		id       string
		tok      string
		body     any
		wantCode int
	}{
		{"update", "PUT", a, demo, upd, 200},
		{"update invalid", "PUT", a, demo, map[string]any{}, 400},
		{"update not JSON", "PUT", a, demo, "x", 400},
		{"read other's", "GET", a, other, nil, 403},
		{"update other's", "PUT", a, other, upd, 403},
		{"delete other's", "DELETE", a, other, nil, 403},
		{"read unknown", "GET", "BO-99999999", demo, nil, 404},
		{"update unknown", "PUT", "BO-99999999", demo, upd, 404},
		{"delete unknown", "DELETE", "BO-99999999", demo, nil, 404},
		{"delete", "DELETE", b, demo, nil, 200},
		{"read deleted", "GET", b, demo, nil, 404},
		{"delete again", "DELETE", b, demo, nil, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do(tt.method, "/orders/"+tt.id, tt.tok, tt.body)
			if r.Status != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", r.Status, tt.wantCode, r.Body)
			}
			msgs := []string{}
			if tt.method != "GET" || r.Status != 200 {
				msgs = r.messages(t)
			}
			if (r.Status == 200) != (len(msgs) == 0) {
				t.Errorf("messages %q with status %d", msgs, r.Status)
			}
		})
	}
	r = e.do("GET", "/orders/"+a, demo, nil)
	if !strings.Contains(string(r.Body), `"action":"DROP_OFF"`) {
		t.Errorf("update not applied: %s", r.Body)
	}

	// Booking a slot request closes the order.
	if !e.sim.MarkBooked(a) || e.sim.MarkBooked("BO-99999999") {
		t.Fatal("MarkBooked")
	}
	if got := list(demo); len(got) != 0 {
		t.Errorf("open orders after booking: %v", got)
	}
	if r := e.do("GET", "/orders/"+a, demo, nil); r.Status != 200 {
		t.Errorf("read booked order: %d", r.Status)
	}
	for _, m := range []string{"PUT", "DELETE"} {
		var body any
		if m == "PUT" {
			body = upd
		}
		r := e.do(m, "/orders/"+a, demo, body)
		if r.Status != 409 || !strings.Contains(r.messages(t)[0], "no longer open") {
			t.Errorf("%s booked order: %d %s", m, r.Status, r.Body)
		}
	}
	if r := e.do("PUT", "/orders/"+c, other, upd, "Content-Type", "text/plain"); r.Status != 415 {
		t.Errorf("update as text/plain: %d", r.Status)
	}
}

// Validation matches property names exactly, so what is stored must too: a key that differs from a
// property only in case is an unknown field, neither validated nor stored.
func TestOrderCaseVariantKeys(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	tests := []struct {
		name     string
		body     string
		wantCode int
		want     []string // substrings of the order as read back
		notWant  []string
	}{
		{name: "a variant after the property", wantCode: 201,
			body: `{"terminalId":"L10001","action":"PICK_UP","ACTION":"THROW","reference":"R",` +
				`"unit":{"loadingState":"FULL","handlingCode":"CT45","HANDLINGCODE":"","Condition":"BROKEN"}}`,
			want: []string{`"action":"PICK_UP"`, `"handlingCode":"CT45"`}, notWant: []string{"THROW", "BROKEN"}},
		{name: "a variant instead of the property", wantCode: 201,
			body: `{"terminalId":"L10001","action":"DROP_OFF","reference":"R",` +
				`"unit":{"loadingState":"EMPTY","isoCode":"22G1","HandlingCode":"not validated"},` +
				`"clientContext":{"InternalNote":"not allowed: spaces and far too long"}}`,
			want: []string{`"handlingCode":null`, `"internalNote":null`}, notWant: []string{"not validated", "not allowed"}},
		{name: "a variant of the only unit code", wantCode: 400,
			body: `{"terminalId":"L10001","action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL","IsoCode":"45G1"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("POST", "/orders", tok, tt.body)
			if r.Status != tt.wantCode {
				t.Fatalf("create: %d, want %d: %s", r.Status, tt.wantCode, r.Body)
			}
			if r.Status != 201 {
				if m := r.messages(t); len(m) != 1 || m[0] != "unit.handlingCode or unit.isoCode must be given" {
					t.Errorf("messages %q", m)
				}
				return
			}
			var c struct{ ID string }
			_ = json.Unmarshal(r.Body, &c)
			got := string(e.do("GET", "/orders/"+c.ID, tok, nil).Body)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("stored order lacks %s: %s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("stored order holds the unvalidated %q: %s", w, got)
				}
			}
		})
	}
}

// With Options.BookAfter every order is booked that long after its creation, so a client of a running
// simulator sees the open-orders rule (docs/upstream.md#open-orders) without MarkBooked.
func TestBookAfter(t *testing.T) {
	const after = 300 * time.Millisecond
	e := newEnv(t, Options{BookAfter: after})
	tok := e.login("demo")
	created := time.Now()
	r := e.do("POST", "/orders", tok, validOrder())
	var c struct{ ID string }
	if err := json.Unmarshal(r.Body, &c); r.Status != 201 || err != nil {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	listed := func() bool { return strings.Contains(string(e.do("GET", "/orders", tok, nil).Body), c.ID) }
	if !listed() {
		t.Fatal("a new order is not listed as open")
	}
	upd := edit(func(o, _, _ map[string]any) { o["action"] = "DROP_OFF" })
	if r := e.do("PUT", "/orders/"+c.ID, tok, upd); r.Status != 200 && time.Since(created) < after {
		t.Fatalf("update while open: %d %s", r.Status, r.Body)
	}
	waitFor(t, "the order to be booked", func() bool { return !listed() })
	if d := time.Since(created); d < after {
		t.Errorf("booked after %v, before %v", d, after)
	}
	for _, m := range []string{"PUT", "DELETE"} {
		var body any
		if m == "PUT" {
			body = upd
		}
		if r := e.do(m, "/orders/"+c.ID, tok, body); r.Status != 409 {
			t.Errorf("%s booked order: %d %s", m, r.Status, r.Body)
		}
	}
	if r := e.do("GET", "/orders/"+c.ID, tok, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"action":"DROP_OFF"`) {
		t.Errorf("read booked order: %d %s", r.Status, r.Body)
	}
}
