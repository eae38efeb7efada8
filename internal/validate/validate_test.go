package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// validReport is a complete TrackingEventReport using every object the schema holds.
const validReport = `{
  "order": {"orderId": "o-1", "positionId": "1", "clientOrderReference": "c-1", "clientPositionReference": null},
  "transport": {"identifier": "t-9", "voyageNumber": "V42"},
  "event": {
    "id": "e-1",
    "timestamp": "2024-05-01T12:30:00.123Z",
    "type": "GATE_IN",
    "observation": {
      "observedMeansOfTransport": {"modeOfTransport": "TRUCK",
        "truck": {"countryCode": "DE", "licensePlate": "HH-AB 123", "forwarder": "F"}, "barge": null, "train": null},
      "observedLoadingUnit": {
        "loadingUnit": {"containerClass": "CONTAINER", "identification": "BIC", "number": "MSCU1234565", "sizeType": null},
        "loadingState": "FULL", "condition": "OK",
        "weight": {"gross": 12000.5, "net": 10000, "tare": 2000.5},
        "oversize": {"excessLengthFront": 0, "excessLengthBack": 10, "excessWidthRight": 0, "excessWidthLeft": 0, "excessHeight": 1e2},
        "observedTemperature": {"temperature": -18.5, "humidity": 40},
        "seals": [{"type": "CUSTOMS", "number": "S1"}, {"type": "SOMETHING_NEW", "number": "S2"}]
      },
      "location": {"id": "DEHAM-T1", "designation": "Hamburg T1", "type": "SEAPORT_TERMINAL", "locationCode": "DEHAM",
        "internationalPortCode": null, "edifactLocationCode": "T1",
        "address": {"street": "Kai 1", "postalCode": "20457", "city": "Hamburg", "country": {"name": "Germany", "code": "DE"}},
        "geoLocation": {"coordinates": {"latitude": 53.5, "longitude": 9.9}}}
    }
  },
  "reporter": {"id": "op-1", "name": "Operator", "address": {"city": "Hamburg"}},
  "somethingTheProviderAddsLater": {"x": [1, 2]}
}`

// benchReport is the report internal/consume's BenchmarkReports sends (its report(7)).
const benchReport = `{"order":{"orderId":"o-1","positionId":"1"},"transport":{"identifier":"truck-7"},` +
	`"event":{"timestamp":"2024-05-01T12:00:07Z","type":"GATE_IN","observation":{"observedMeansOfTransport":` +
	`{"modeOfTransport":"TRUCK","truck":{"countryCode":"DE","licensePlate":"HH-TB 7"}},"observedLoadingUnit":` +
	`{"loadingUnit":{"containerClass":"CONTAINER","number":"MSCU1234565"},"loadingState":"FULL",` +
	`"seals":[{"type":"CUSTOMS","number":"S-7"}]}}},"reporter":{"id":"op-1","name":"Test Operator"}}`

func seals(n int, item string) string {
	return `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_OUT","observation":{"observedLoadingUnit":{"seals":[` +
		strings.TrimSuffix(strings.Repeat(item+",", n), ",") + `]}}}}`
}

// reportCases are reports valid and invalid in every way Report tells, with its problems.
var reportCases = []struct {
	name     string
	body     string
	maxBytes int
	want     []string // nil: valid
}{
	{name: "complete report", body: validReport},
	{name: "minimal report", body: `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN"}}`},
	{name: "unknown event type", body: `{"event":{"timestamp":"2024-05-01T12:30:00+02:00","type":"TELEPORTED"}}`},
	{name: "lower-case t and z", body: `{"event":{"timestamp":"2024-05-01t12:30:00z","type":"GATE_IN"}}`},
	{name: "optional objects null", body: `{"order":null,"transport":null,"reporter":null,"event":{"timestamp":"2024-05-01T12:30:00Z","type":"X","observation":null,"id":null}}`},
	{name: "100 seals", body: seals(100, `{"number":"s"}`)},
	{name: "surrounding white space", body: " \n" + `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN"}}` + "\n\t"},

	{name: "empty", body: "", want: []string{"the report is empty; a TrackingEventReport JSON object is expected"}},
	{name: "oversized", body: validReport, maxBytes: 100,
		want: []string{fmt.Sprintf("the report is %d bytes, more than the limit of 100 bytes", len(validReport))}},
	{name: "not JSON", body: `event=GATE_IN`,
		want: []string{"the report is not valid JSON: invalid character 'e' looking for beginning of value at byte 1"}},
	{name: "truncated JSON", body: `{"event":{"timestamp":`,
		want: []string{"the report is not valid JSON: it ends in the middle of a value"}},
	{name: "two objects", body: `{"event":{}} {"event":{}}`,
		want: []string{"the report is not valid JSON: unexpected data after the value ending at byte 12"}},
	{name: "not UTF-8", body: "{\"event\":\"\xff\"}", want: []string{"the report is not valid UTF-8"}},
	{name: "array", body: `[{"event":{}}]`,
		want: []string{"the report must be a JSON object (TrackingEventReport), not an array"}},
	{name: "string", body: `"hello"`,
		want: []string{"the report must be a JSON object (TrackingEventReport), not a string"}},
	{name: "missing event", body: `{"order":{"orderId":"o","positionId":"p"}}`, want: []string{"event is missing"}},
	{name: "null event", body: `{"event":null}`, want: []string{"event must be an object, not null"}},
	{name: "event not an object", body: `{"event":"GATE_IN"}`, want: []string{"event must be an object, not a string"}},
	{name: "empty event", body: `{"event":{}}`, want: []string{"event.timestamp is missing", "event.type is missing"}},
	{name: "timestamp not a date-time", body: `{"event":{"timestamp":"yesterday","type":"GATE_IN"}}`,
		want: []string{`event.timestamp is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): "yesterday"`}},
	{name: "timestamp without zone", body: `{"event":{"timestamp":"2024-05-01T12:30:00","type":"GATE_IN"}}`,
		want: []string{`event.timestamp is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): "2024-05-01T12:30:00"`}},
	{name: "timestamp with a comma before the fraction", body: `{"event":{"timestamp":"2024-05-01T12:30:00,5Z","type":"GATE_IN"}}`,
		want: []string{`event.timestamp is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): "2024-05-01T12:30:00,5Z"`}},
	{name: "timestamp offset of 24 hours", body: `{"event":{"timestamp":"2024-05-01T12:30:00+24:00","type":"GATE_IN"}}`,
		want: []string{`event.timestamp is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): "2024-05-01T12:30:00+24:00"`}},
	{name: "timestamp out of range", body: `{"event":{"timestamp":"2024-13-01T12:30:00Z","type":"GATE_IN"}}`,
		want: []string{`event.timestamp is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): "2024-13-01T12:30:00Z"`}},
	{name: "timestamp a number", body: `{"event":{"timestamp":1714566600,"type":"GATE_IN"}}`,
		want: []string{"event.timestamp must be a date-time string (RFC 3339), not a number"}},
	{name: "long bad value cut and escaped", body: `{"event":{"timestamp":"` + strings.Repeat("x", 50) + `\r\n","type":"A"}}`,
		want: []string{`event.timestamp is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): "` + strings.Repeat("x", 40) + `"…`}},
	{name: "type not a string", body: `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":3}}`,
		want: []string{"event.type must be a string, not a number"}},
	{name: "type null", body: `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":null}}`,
		want: []string{"event.type must be a string, not null"}},
	{name: "order without ids", body: `{"order":{"clientOrderReference":"c"},"event":{"timestamp":"2024-05-01T12:30:00Z","type":"A"}}`,
		want: []string{"order.orderId is missing", "order.positionId is missing"}},
	{name: "wrong types everywhere", body: `{"order":[],"transport":{"identifier":7},"reporter":{"address":{"country":"DE"}},
			"event":{"id":true,"timestamp":"2024-05-01T12:30:00Z","type":"A","observation":{
			"observedMeansOfTransport":{"truck":"HH-AB 123","train":{"identifier":1}},
			"observedLoadingUnit":{"loadingUnit":{"containerClass":false},"weight":{"gross":"12t"},
			  "oversize":{"excessHeight":1.5,"excessLengthFront":3000000000},"seals":{"number":"s"}},
			"location":{"geoLocation":{"coordinates":{"latitude":"53.5"}}}}}}`,
		want: []string{
			"order must be an object, not an array",
			"transport.identifier must be a string, not a number",
			"reporter.address.country must be an object, not a string",
			"event.id must be a string, not a boolean",
			"event.observation.observedMeansOfTransport.truck must be an object, not a string",
			"event.observation.observedMeansOfTransport.train.identifier must be a string, not a number",
			"event.observation.observedLoadingUnit.loadingUnit.containerClass must be a string, not a boolean",
			"event.observation.observedLoadingUnit.weight.gross must be a number, not a string",
			`event.observation.observedLoadingUnit.oversize.excessHeight must be an integer, not "1.5"`,
			`event.observation.observedLoadingUnit.oversize.excessLengthFront is out of the int32 range: "3000000000"`,
			"event.observation.observedLoadingUnit.seals must be an array, not an object",
			"event.observation.location.geoLocation.coordinates.latitude must be a number, not a string",
			// Location.designation is required: the schema says so, the walker did not check it.
			"event.observation.location.designation is missing",
		}},
	{name: "missing fields at the end of their object, escaped key", body: `{"order":{"positionId":"1","orderI\u0064":2},"event":{"type":"A"}}`,
		want: []string{"order.orderId must be a string, not a number", "event.timestamp is missing"}},
	{name: "escaped date-time", body: `{"event":{"timestamp":"2024-05-01\u005412:30:00Z","type":"A"}}`},
	{name: "int32 forms", body: `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"A","observation":{"observedLoadingUnit":` +
		`{"oversize":{"excessHeight":-2147483648,"excessWidthLeft":2147483647,"excessWidthRight":1.0e1,"excessLengthBack":1e400,"excessLengthFront":-0}}}}}`,
		want: []string{`event.observation.observedLoadingUnit.oversize.excessLengthBack is out of the int32 range: "1e400"`}},
	{name: "101 seals", body: seals(101, `{"number":"s"}`),
		want: []string{"event.observation.observedLoadingUnit.seals has 101 items; at most 100 are allowed"}},
	{name: "bad seal items", body: seals(3, `{"number":1}`),
		want: []string{
			"event.observation.observedLoadingUnit.seals[0].number must be a string, not a number",
			"event.observation.observedLoadingUnit.seals[1].number must be a string, not a number",
			"event.observation.observedLoadingUnit.seals[2].number must be a string, not a number",
		}},
	{name: "key twice", body: `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN"},"event":{"type":"GATE_OUT"}}`,
		want: []string{`the report gives the key "event" twice; a key may appear only once in an object, or readers differ on its value`}},
	{name: "key twice deep, escaped", body: `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN","observation":` +
		`{"observedLoadingUnit":{"seals":[{"number":"S1"},{"number":"S2","n\u0075mber":"S3"}]}}}}`,
		want: []string{`the report gives the key "number" twice in event.observation.observedLoadingUnit.seals[1]; ` +
			`a key may appear only once in an object, or readers differ on its value`}},
	{name: "key twice in an unknown member", body: `{"x":{"a":[{"b":1,"b":1}]},"event":{"timestamp":"2024-05-01T12:30:00Z","type":"A"}}`,
		want: []string{`the report gives the key "b" twice in x.a[0]; a key may appear only once in an object, or readers differ on its value`}},
	{name: "keys differing in case", body: `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN","Type":"TELEPORTED"}}`,
		want: []string{`the report gives the keys "type" and "Type" in event, which differ only in case; readers that ignore case ` +
			`take them as one key given twice and differ on its value`}},
	{name: "order id not UTF-8", body: "{\"order\":{\"orderId\":\"o-\xc0\xaf\",\"positionId\":\"1\"},\"event\":{\"timestamp\":\"2024-05-01T12:30:00Z\",\"type\":\"A\"}}",
		want: []string{"the report is not valid UTF-8"}}, // an overlong "/"
	{name: "order id with an unpaired surrogate", body: `{"order":{"orderId":"o-\ud800","positionId":"1"},"event":{"timestamp":"2024-05-01T12:30:00Z","type":"A"}}`,
		want: []string{`the report is not valid UTF-8: the escape \ud800 in order.orderId is half of a UTF-16 surrogate pair without the other half`}},
	{name: "surrogate pair", body: `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"A","id":"\ud83d\ude9a"}}`},
	{name: "key twice after a syntax error", body: `{"event":{},"event":`,
		want: []string{"the report is not valid JSON: it ends in the middle of a value"}},
	{name: "null seal", body: seals(1, `null`),
		want: []string{"event.observation.observedLoadingUnit.seals[0] must be an object, not null"}},
}

func TestValidate(t *testing.T) {
	for _, tt := range reportCases {
		t.Run(tt.name, func(t *testing.T) {
			got := Report([]byte(tt.body), tt.maxBytes)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") || (got == nil) != (tt.want == nil) {
				t.Errorf("Report:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestValidateListsAtMost50Problems(t *testing.T) {
	got := Report([]byte(seals(100, `{"number":1,"type":2}`)), 0)
	if len(got) != 51 || got[50] != "and 150 more problems" {
		t.Errorf("got %d problems, last %q; want 50 and a count of 150 more", len(got), got[len(got)-1])
	}
}

// FuzzValidate checks that Report never panics, that every problem is fit for a header (one line of
// valid UTF-8), and that it gives the verdict and the problems of validateWalker, the hand-written walker
// it replaced (in another order: sorted). Known differences are skipped: of a key given twice the walker
// checks every value, Report refuses the body (as it refuses an unpaired surrogate escape); Report requires a
// location's designation and a loading unit's containerClass (required in their schemas), the walker did not;
// both list at most 50 problems, maybe not the same 50.
func FuzzValidate(f *testing.F) {
	f.Add([]byte(validReport))
	f.Add([]byte(`{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN"}}`))
	f.Add([]byte(`{"event":{"timestamp":"2024-05-01T12:30:00Z\n","type":[1,{"a":null}]}}`))
	f.Add([]byte(`{"order":{"orderId":1},"event":{"timestamp":"noon","type":["GATE_IN"]}} `))
	f.Add([]byte(`{"event":{"observation":{"observedLoadingUnit":{"oversize":{"excessHeight":1.5e3,"excessWidthLeft":"x"}}}}}`))
	f.Add([]byte(`{"event":{"observation":{"observedLoadingUnit":{"oversize":{"excessHeight":1e999999999}},"location":{"geoLocation":{"coordinates":{"latitude":-1e999999999}}}}}}`))
	f.Add([]byte(`{"reporter":{"address":{"country":{"code":"DEU"}}},"event":{"timestamp":"2024-05-01T12:30:00Z","type":"X"}}`))
	f.Add([]byte(seals(101, `{"number":"s"}`)))
	f.Add([]byte(seals(3, `{"number":1,"type":null}`)))
	f.Add([]byte(`{"x":[[[[[[[[[[[[{"a":[{}]}]]]]]]]]]]]],"event":{"type":1},"order":{"orderId":"a","orderId":2}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got := Report(body, 1<<16)
		for _, p := range got {
			if p == "" || strings.ContainsAny(p, "\r\n") || !utf8.ValidString(p) {
				t.Fatalf("problem not fit for a header: %q", p)
			}
		}
		want := validateWalker(body, 1<<16)
		if len(want) >= MaxProblems || len(got) >= MaxProblems || hasDuplicateKeys(body) || Unambiguous(body, "") != nil {
			return // the walker took keys twice and unpaired surrogates as they came
		}
		got = slices.DeleteFunc(got, func(p string) bool {
			return strings.HasSuffix(p, "location.designation is missing") || strings.HasSuffix(p, "loadingUnit.containerClass is missing")
		})
		got, want = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Fatalf("body %q\n          Report: %q\n  validateWalker: %q", body, got, want)
		}
	})
}

// hasDuplicateKeys reports whether an object in body, valid JSON or not, has a key twice.
func hasDuplicateKeys(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string token is a key
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		top := len(stack) - 1
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if top >= 0 && stack[top].object {
					stack[top].key = true
				}
				stack = append(stack, frame{keys: map[string]bool{}, object: t == '{', key: t == '{'})
			default:
				stack = stack[:top]
			}
			continue
		case string:
			if top >= 0 && stack[top].object && stack[top].key {
				if stack[top].keys[t] {
					return true
				}
				stack[top].keys[t] = true
				stack[top].key = false
				continue
			}
		}
		if top >= 0 && stack[top].object {
			stack[top].key = true
		}
	}
}

func ExampleReport() {
	for _, p := range Report([]byte(`{"order":{"orderId":"o-1"},"event":{"timestamp":"1 May 2024","type":"GATE_IN"}}`), 0) {
		fmt.Println(p)
	}
	// Output:
	// order.positionId is missing
	// event.timestamp is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): "1 May 2024"
}

// BenchmarkValidate compares Report, the check against the schema alone, the JSON Schema validator the
// check replaced (reference_test.go), and the hand-written walker Report was before, on the same bodies:
// the complete report of the tests, the report internal/consume's BenchmarkReports sends, and an invalid
// one.
func BenchmarkValidate(b *testing.B) {
	bodies := []struct {
		name  string
		body  []byte
		valid bool
	}{
		{"complete", []byte(validReport), true},
		{"bench-report", []byte(benchReport), true},
		{"invalid", []byte(seals(3, `{"number":1}`)), false},
	}
	for _, impl := range []struct {
		name string
		fn   func([]byte, int) []string
	}{
		{"Validate", Report}, // the fast path, the check against the schema for what it does not accept
		{"schema-only", func(b []byte, _ int) []string { return reportBody.check(b) }},
		{"jsonschema", func(b []byte, _ int) []string { return referenceCheck(b, reportBody) }}, // the JSON Schema reference
		{"walker-before", validateWalker},                                                       // the hand-written walker (reference)
		{"Unambiguous", func(b []byte, _ int) []string { return Unambiguous(b, "the report") }}, // Report's share for UTF-8, keys and escapes
	} {
		for _, bb := range bodies {
			if impl.name == "Unambiguous" && !bb.valid {
				continue // it finds nothing wrong there
			}
			b.Run(impl.name+"/"+bb.name, func(b *testing.B) {
				b.SetBytes(int64(len(bb.body)))
				b.ReportAllocs()
				for b.Loop() {
					if p := impl.fn(bb.body, 0); (p == nil) != bb.valid {
						b.Fatal(p)
					}
				}
			})
		}
	}
}

func TestHasDuplicateKeys(t *testing.T) {
	for body, want := range map[string]bool{
		`{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}`: false,
		`{"a":1,"b":2,"a":3}`:                       true,
		`{"a":{"x":1,"x":2}}`:                       true,
		`[{"a":"a","b":"a"},{"a":1}]`:               false,
		`{"a":[1,"a"],"b":{},"a":null}`:             true,
	} {
		if got := hasDuplicateKeys([]byte(body)); got != want {
			t.Errorf("hasDuplicateKeys(%s) = %v", body, got)
		}
	}
}

func TestValidateDepthLikeEncodingJSON(t *testing.T) {
	for _, n := range []int{9999, 10000} { // with the report object: 10000 and 10001 levels
		for _, event := range []string{`{"timestamp":"2024-05-01T12:30:00Z","type":"A"}`, `{}`} {
			// With problems, Report reads the body again to order them: in linear time, however deep.
			body := []byte(`{"x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `,"event":` + event + `}`)
			got, want := Report(body, 0), validateWalker(body, 0)
			if !slices.Equal(got, want) {
				t.Errorf("%d levels: Report %q, validateWalker %q", n+1, got, want)
			}
		}
	}
}

// The fast path is derived from the report schema: without it every report pays for decoding and the
// check against the schema.
func TestFastPathDerived(t *testing.T) {
	fast := reportFields()
	if fast == nil {
		_, err := fastFields(schemas()[reportBody.name])
		t.Fatalf("no fast path: %v", err)
	}
	for _, body := range []string{validReport, benchReport, `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"A"}}`} {
		if !fastValid([]byte(body), fast) {
			t.Errorf("the fast path does not accept %s", body)
		}
	}
}

// FuzzFastPath checks that the fast path accepts a body only when the check against the schema does, and
// (but for a key given twice, which the walker checks every time) every body it does.
func FuzzFastPath(f *testing.F) {
	f.Add([]byte(validReport))
	f.Add([]byte(`{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN"}}`))
	f.Add([]byte(`{"order":null,"event":{"timestamp":"2024-05-01t12:30:00z","type":"A","observation":{"location":{"designation":"x"}}}}`))
	f.Add([]byte(`{"event":{"observation":{"observedLoadingUnit":{"oversize":{"excessHeight":1e3}}}}}`))
	f.Add([]byte(seals(100, `{"number":"s"}`)))
	f.Add([]byte(`{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"A"},"event":{"type":1}}`))
	fields := reportFields()
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(bytes.TrimSpace(body)) == 0 || !utf8.Valid(body) {
			return
		}
		fast, schema := fastValid(body, fields), reportBody.check(body) == nil
		if fast && !schema || schema && !fast && !hasDuplicateKeys(body) {
			t.Fatalf("body %q: fast path %v, schema %v %q", body, fast, schema, reportBody.check(body))
		}
	})
}
