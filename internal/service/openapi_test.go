package service_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestOpenAPIValidatorAgreesWithSimulator sends booking orders through the service to the simulator,
// which checks requests against the same OpenAPI document: the valid ones (every optional member, and
// null where the document says nullable) must reach it and be accepted, the invalid ones must be refused
// with 400 listing every problem, without an upstream call, and the simulator must refuse them too.
func TestOpenAPIValidatorAgreesWithSimulator(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	term := h.terminal()
	full := func(ref string) string {
		return `{"terminalId":"` + term + `","action":"DROP_OFF","reference":"` + ref + `","unit":{` +
			`"loadingState":"EMPTY","handlingCode":null,"isoCode":"22G1","number":"MSKU1234565",` +
			`"dangerousGoodsIndication":"NOT_DANGEROUS","condition":"OK",` +
			`"seals":[{"type":"CUSTOMS","number":"S1"},{"number":"S2"}]},` +
			`"clientContext":{"plannedDate":{"date":"2024-02-29","timeOfDay":"EARLY"},"internalNote":"A-1/#2"}}`
	}
	for _, body := range []string{
		full("FULL-1"),
		order(term, "MIN-1"),
		`{"terminalId":"` + term + `","action":"PICK_UP","reference":"NULLS","unit":{"loadingState":"FULL","isoCode":"22G1"},` +
			`"clientContext":{"plannedDate":null,"internalNote":null}}`,
		`{"terminalId":"` + term + `","action":"PICK_UP","reference":"NULL-CTX","clientContext":null,` +
			`"unit":{"loadingState":"UNKNOWN","isoCode":"22G1","extra":"unknown members are allowed"}}`,
	} {
		h.ok("orders.create", body)
	}
	id := h.create("UPD")
	h.ok("orders.update", `{"id":"`+id+`","order":`+full("UPD-2")+`}`)

	for _, tc := range []struct {
		name, body string
		want       []string // substrings of the messages, one per problem, in the order of the body
	}{
		{"enumerations and lengths", `{"terminalId":"` + term + `","action":"PARK","reference":"R","unit":{"loadingState":"HALF","isoCode":"22G1",` +
			`"seals":[{"type":"WAX"}]},"clientContext":{"internalNote":"ABCDEFGHIJKLMNOPQRSTUVWXYZ"}}`,
			[]string{`action must be one of PICK_UP, DROP_OFF, not "PARK"`, `unit.loadingState must be one of FULL, EMPTY, UNKNOWN, not "HALF"`,
				`unit.seals[0].type must be one of`, "clientContext.internalNote has 26 characters; at most 20 are allowed"}},
		{"null where not nullable", `{"terminalId":null,"action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL","isoCode":"22G1","condition":null,` +
			`"seals":[null]}}`,
			[]string{"terminalId must be a string, not null", "unit.condition must be a string, not null", "unit.seals[0] must be an object, not null"}},
		{"missing and mistyped", `{"action":"PICK_UP","reference":7,"unit":{"seals":{}},"clientContext":{"plannedDate":{"date":"2023-02-29","timeOfDay":1}}}`,
			[]string{"reference must be a string, not a number", "unit.seals must be an array, not an object", "unit.loadingState is missing",
				`clientContext.plannedDate.date is not a date (like 2024-05-01): "2023-02-29"`, "clientContext.plannedDate.timeOfDay must be a string", "terminalId is missing"}},
		{"pattern", `{"terminalId":"` + term + `","action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL","isoCode":"22G1"},` +
			`"clientContext":{"internalNote":"a b"}}`,
			[]string{`clientContext.internalNote does not match the pattern ^[A-Za-z0-9/#\\-]*$: "a b"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.calls.n.Load()
			r := h.request("orders.create", tc.body)
			if r.code != 400 {
				t.Fatalf("code %d (%s), want 400", r.code, r.desc)
			}
			msgs := r.messages(t)
			if len(msgs) != len(tc.want) {
				t.Errorf("messages %q, want %d", msgs, len(tc.want))
			}
			for i, w := range tc.want {
				if i < len(msgs) && !strings.Contains(msgs[i], w) {
					t.Errorf("message %d %q does not contain %q", i, msgs[i], w)
				}
			}
			if n := h.calls.n.Load() - before; n != 0 {
				t.Errorf("the upstream was called %d times", n)
			}
			if status, body := h.direct(h.tokens, http.MethodPost, "/orders", []byte(tc.body)); status != http.StatusBadRequest {
				t.Errorf("the simulator answered %d %s, want 400", status, body)
			}
		})
	}
}
