package publish

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/jsonscan"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// benchEvent is a realistic tracking event of about 1 KB.
const benchEvent = `{"id":"evt_01HZX3K9M2Q7R8S4T5V6W7X8Y9","type":"truck.position.updated",` +
	`"timestamp":"2024-05-14T09:31:27.512Z","source":"telematics/fleet-gw-eu-2","version":3,` +
	`"observation":{"type":"position","observedAt":"2024-05-14T09:31:25.000Z",` +
	`"truck":{"id":"TRK-4821","licensePlate":"HH-TB 4821","vin":"WDB9634031L123456",` +
	`"carrier":{"id":"CAR-0042","name":"Nordfracht Logistik GmbH"}},` +
	`"loadingUnit":{"id":"LU-77812","kind":"trailer","isoCode":"45G1","containerNumber":"MSKU1234565",` +
	`"seals":[{"number":"SL-0098123","type":"bolt","intact":true},` +
	`{"number":"SL-0098124","type":"cable","intact":true,"checkedAt":null}],` +
	`"temperature":{"setpoint":-18.0,"actual":-17.6,"unit":"C"}},` +
	`"location":{"address":{"street":"Am Sandtorkai 50","postalCode":"20457","city":"Hamburg",` +
	`"country":"DE"},"coordinates":{"lat":53.54313,"lon":9.98837,"accuracyM":4.5e0},` +
	`"geofence":"HH-PORT-CTA","heading":271,"speedKmh":0}},` +
	`"tags":["reefer","priority"],"driver":{"id":"DRV-311","name":"Jürgen Ößwald"},` +
	`"meta":{"ingestedAt":"2024-05-14T09:31:27.530Z","sequence":184467,"retries":0,` +
	`"note":"caf\u00e9 stop \"Nord\"\n"}}`

func TestScanEvent(t *testing.T) {
	t.Parallel()
	obj := func(kind Kind) Fields { return Fields{TypeKind: kind} }
	tests := []struct {
		name string
		in   string
		want Fields
		err  string // substring of the error; "" means success
	}{
		// Valid events.
		{"realistic", benchEvent, Fields{"evt_01HZX3K9M2Q7R8S4T5V6W7X8Y9", "truck.position.updated", KindString, "2024-05-14T09:31:27.512Z", layout.NoUnit}, ""},
		{"minimal", `{"id":"a","type":"b","timestamp":"c"}`, Fields{"a", "b", KindString, "c", layout.NoUnit}, ""},
		{"empty object", `{}`, obj(KindMissing), ""},
		{"empty strings", `{"id":"","type":"","timestamp":""}`, Fields{"", "", KindString, "", layout.NoUnit}, ""},
		{"order irrelevant", `{"timestamp":"t","x":[1,2,{"id":"no"}],"type":"y","id":"i"}`, Fields{"i", "y", KindString, "t", layout.NoUnit}, ""},
		{"all value kinds", `{"a":[true,false,null,-0,0.5,1e9,-2.5E-3,1E+2,"s",{},[],[[]],{"b":{}}],"type":"x"}`, Fields{Type: "x", TypeKind: KindString}, ""},
		{"long strings", `{"id":"` + strings.Repeat("x", 1000) + `","type":"` + strings.Repeat("é", 300) + `"}`,
			Fields{ID: strings.Repeat("x", 1000), Type: strings.Repeat("é", 300), TypeKind: KindString}, ""},

		// Only top-level members count.
		{"nested type ignored", `{"observation":{"type":"inner","id":"inner"},"id":"outer"}`, Fields{ID: "outer"}, ""},
		{"nested in array ignored", `{"list":[{"type":"inner"}]}`, obj(KindMissing), ""},
		{"key named like value", `{"x":"type","y":"id"}`, obj(KindMissing), ""},

		// The loading unit: the string at observation.observedLoadingUnit.loadingUnit.number, as a token.
		{"unit", unitEvent, Fields{"ev-0000000000184467", "GATE_IN", KindString, "2026-11-22T10:00:00.125Z", "MSKU1234565"}, ""},
		{"unit mapped", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"msku 123456-7"}}}}`, Fields{Unit: "MSKU1234567"}, ""},
		{"unit escaped", `{"\u006fbservation":{"observedLoadingUnit":{"loadingUnit":{"number":"\u006dsku1"}}}}`, Fields{Unit: "MSKU1"}, ""},
		{"unit beside the rest", `{"id":"x","observation":{"a":1,"observedLoadingUnit":{"loadingUnit":{"type":"C","number":"TGHU7654321"},"b":[1]}},"type":"T"}`,
			Fields{ID: "x", Type: "T", TypeKind: KindString, Unit: "TGHU7654321"}, ""},
		{"unit number not a string", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":12345}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit number an array", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":["A1"]}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit number null", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":null}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit only separators", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"- /."}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit step not an object", `{"observation":{"observedLoadingUnit":{"loadingUnit":"A1"}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit observation an array", `{"observation":[{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}}]}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit path incomplete", `{"observation":{"observedLoadingUnit":{"loadingUnit":{}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit path elsewhere", `{"number":"A1","loadingUnit":{"number":"B2"},"x":{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"C3"}}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit later observation counts", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}},"observation":{}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit later observation counts too", `{"observation":{},"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1"}}}}`, Fields{Unit: "A1"}, ""},
		{"unit later number counts", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A1","number":7}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit key case", `{"observation":{"ObservedLoadingUnit":{"loadingUnit":{"number":"A1"}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit non-ASCII", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"ﬀmsku\u0131 1ü"}}}}`, Fields{Unit: "MSKUI1"}, ""},
		{"unit control characters", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"A\u0000B\nC\u007f"}}}}`, Fields{Unit: "ABC"}, ""},
		{"unit invalid utf8", "{\"observation\":{\"observedLoadingUnit\":{\"loadingUnit\":{\"number\":\"A\xffB\"}}}}", Fields{Unit: "AB"}, ""},
		{"unit 64", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"` + strings.Repeat("a-", 64) + `"}}}}`, Fields{Unit: strings.Repeat("A", 64)}, ""},
		{"unit 65", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"` + strings.Repeat("A", 65) + `"}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit 10 KB", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"` + strings.Repeat("MSKU1234565 ", 850) + `"}}}}`, Fields{Unit: layout.NoUnit}, ""},
		{"unit 10 KB of separators", `{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"` + strings.Repeat("-", 10240) + `"}}}}`, Fields{Unit: layout.NoUnit}, ""},

		// Type kinds.
		{"type missing", `{"id":"a"}`, Fields{ID: "a"}, ""},
		{"type null", `{"type":null}`, obj(KindOther), ""},
		{"type number", `{"type":42}`, obj(KindOther), ""},
		{"type bool", `{"type":true}`, obj(KindOther), ""},
		{"type object", `{"type":{"type":"x"}}`, obj(KindOther), ""},
		{"type array", `{"type":["x"]}`, obj(KindOther), ""},
		{"id and timestamp not strings", `{"id":7,"timestamp":{"s":1}}`, obj(KindMissing), ""},

		// Duplicate keys: the last one wins, whatever the kinds.
		{"dup last wins", `{"type":"a","type":"b"}`, Fields{Type: "b", TypeKind: KindString}, ""},
		{"dup string then null", `{"type":"a","type":null}`, obj(KindOther), ""},
		{"dup null then string", `{"type":null,"type":"c"}`, Fields{Type: "c", TypeKind: KindString}, ""},
		{"dup id number after string", `{"id":"a","id":1}`, obj(KindMissing), ""},
		{"dup escaped key", `{"type":"a","typ\u0065":"b"}`, Fields{Type: "b", TypeKind: KindString}, ""},

		// Keys compared after decoding, case-sensitively.
		{"escaped key", `{"\u0069\u0064":"x","t\u0079pe":"y","times\u0074amp":"z"}`, Fields{"x", "y", KindString, "z", layout.NoUnit}, ""},
		{"case sensitive", `{"ID":"x","Type":"y","TIMESTAMP":"z"}`, obj(KindMissing), ""},
		{"key with slash escape", `{"typ\/e":"y"}`, obj(KindMissing), ""},
		{"long escaped key", `{"\u0074\u0079\u0070\u0065\u0074\u0079\u0070\u0065\u0074\u0079":"y"}`, obj(KindMissing), ""},
		{"key invalid utf8", "{\"typ\xff\":\"y\",\"ty\\u0070\xe9\":\"z\"}", obj(KindMissing), ""},

		// Escapes in values, decoded like encoding/json.
		{"simple escapes", `{"type":"a\"b\\c\/d\be\ff\ng\rh\ti"}`, Fields{Type: "a\"b\\c/d\be\ff\ng\rh\ti", TypeKind: KindString}, ""},
		{"unicode escape", `{"id":"caf\u00e9 \u20AC"}`, Fields{ID: "café €"}, ""},
		{"surrogate pair", `{"id":"\ud83d\ude9a"}`, Fields{ID: "🚚"}, ""},
		{"lone high surrogate", `{"id":"a\ud83db"}`, Fields{ID: "a\uFFFDb"}, ""},
		{"lone low surrogate", `{"id":"\ude9a"}`, Fields{ID: "\uFFFD"}, ""},
		{"high high low", `{"id":"\ud83d\ud83d\ude9a"}`, Fields{ID: "\uFFFD🚚"}, ""},
		{"high then bmp", `{"id":"\ud83d\u0041"}`, Fields{ID: "\uFFFDA"}, ""},
		{"nul escape", `{"id":"\u0000"}`, Fields{ID: "\x00"}, ""},
		{"invalid utf8 replaced", "{\"id\":\"a\xffb\xc3\"}", Fields{ID: "a\uFFFDb\uFFFD"}, ""},
		{"utf8 surrogate bytes replaced", "{\"id\":\"\xed\xa0\x80\"}", Fields{ID: "\uFFFD\uFFFD\uFFFD"}, ""},
		{"escape and invalid utf8", "{\"id\":\"\\n\xff\",\"type\":\"plain\"}", Fields{ID: "\n\uFFFD", Type: "plain", TypeKind: KindString}, ""},
		{"long escaped value", `{"id":"` + strings.Repeat(`\u00e9`, 200) + `"}`, Fields{ID: strings.Repeat("é", 200)}, ""},

		// White space.
		{"surrounding whitespace", " \t\r\n{ \"id\" : \"a\" , \"type\"\n:\t\"b\" }\r\n ", Fields{ID: "a", Type: "b", TypeKind: KindString}, ""},
		{"whitespace in arrays", `{"a":[ 1 , [ ] , { } ] }`, obj(KindMissing), ""},

		// Not an object.
		{"array", `[{"type":"x"}]`, Fields{}, "not a JSON object"},
		{"string", `"x"`, Fields{}, "not a JSON object"},
		{"number", ` 12.5 `, Fields{}, "not a JSON object"},
		{"true", `true`, Fields{}, "not a JSON object"},
		{"null", `null`, Fields{}, "not a JSON object"},
		{"empty", ``, Fields{}, "invalid JSON at byte 0: unexpected end of input"},
		{"only whitespace", " \n\t ", Fields{}, "invalid JSON at byte 4: unexpected end of input"},
		{"invalid array", `[1,]`, Fields{}, "invalid JSON at byte 3: invalid character ']' looking for beginning of value"},

		// Trailing garbage and truncation.
		{"trailing garbage", `{"id":"a"}x`, Fields{}, "invalid JSON at byte 10: invalid character 'x' after top-level value"},
		{"two objects", `{} {}`, Fields{}, "invalid JSON at byte 3: invalid character '{' after top-level value"},
		{"trailing comma", `{"a":1,}`, Fields{}, "invalid JSON at byte 7: invalid character '}' looking for beginning of object key string"},
		{"truncated in string", `{"id":"ab`, Fields{}, "invalid JSON at byte 9: unexpected end of input"},
		{"truncated after key", `{"id"`, Fields{}, "unexpected end of input"},
		{"truncated after colon", `{"id":`, Fields{}, "unexpected end of input"},
		{"truncated after value", `{"id":1`, Fields{}, "unexpected end of input"},
		{"truncated literal", `{"a":tru`, Fields{}, "unexpected end of input"},
		{"truncated escape", `{"a":"\`, Fields{}, "unexpected end of input"},
		{"truncated unicode escape", `{"a":"\u12`, Fields{}, "unexpected end of input"},
		{"truncated nested", `{"a":[{"b":[]}`, Fields{}, "unexpected end of input"},
		{"truncated realistic", benchEvent[:len(benchEvent)-1], Fields{}, "unexpected end of input"},
		{"unclosed brace", `{`, Fields{}, "invalid JSON at byte 1: unexpected end of input"},
		{"missing colon", `{"a" 1}`, Fields{}, "invalid JSON at byte 5: invalid character '1' after object key"},
		{"missing comma", `{"a":1 "b":2}`, Fields{}, "invalid JSON at byte 7: invalid character '\"' after object key:value pair"},
		{"missing array comma", `{"a":[1 2]}`, Fields{}, "invalid JSON at byte 8: invalid character '2' after array element"},
		{"mismatched close", `{"a":[1}`, Fields{}, "invalid character '}' after array element"},
		{"unquoted key", `{a:1}`, Fields{}, "invalid JSON at byte 1: invalid character 'a' looking for beginning of object key string"},
		{"single quotes", `{'a':1}`, Fields{}, `invalid character '\'' looking for beginning of object key string`},
		{"bad literal", `{"a":nul}`, Fields{}, "invalid JSON at byte 8: invalid character '}' in literal null (expecting 'l')"},
		{"capital literal", `{"a":True}`, Fields{}, "invalid character 'T' looking for beginning of value"},

		// Bad numbers.
		{"leading zero", `{"a":01}`, Fields{}, "invalid JSON at byte 6: invalid character '1' after object key:value pair"},
		{"top leading zero", `01`, Fields{}, "invalid character '1' after top-level value"},
		{"trailing dot", `{"a":1.}`, Fields{}, "invalid JSON at byte 7: invalid character '}' after decimal point in numeric literal"},
		{"lone minus", `{"a":-}`, Fields{}, "invalid JSON at byte 6: invalid character '}' in numeric literal"},
		{"minus at end", `-`, Fields{}, "unexpected end of input"},
		{"empty exponent", `{"a":1e}`, Fields{}, "invalid JSON at byte 7: invalid character '}' in exponent of numeric literal"},
		{"signed empty exponent", `{"a":1e+}`, Fields{}, "in exponent of numeric literal"},
		{"leading dot", `{"a":.5}`, Fields{}, "invalid character '.' looking for beginning of value"},
		{"leading plus", `{"a":+1}`, Fields{}, "invalid character '+' looking for beginning of value"},
		{"hex number", `{"a":0x1}`, Fields{}, "invalid character 'x' after object key:value pair"},
		{"minus space", `{"a":- 1}`, Fields{}, "in numeric literal"},

		// Control characters and invalid escapes in strings.
		{"newline in string", "{\"a\":\"x\ny\"}", Fields{}, `invalid JSON at byte 7: invalid character '\x0a' in string literal`},
		{"tab in string", "{\"type\":\"a\tb\"}", Fields{}, `invalid character '\x09' in string literal`},
		{"nul in key", "{\"a\x00\":1}", Fields{}, `invalid character '\x00' in string literal`},
		{"bad escape", `{"a":"\x"}`, Fields{}, "invalid JSON at byte 7: invalid character 'x' in string escape code"},
		{"single quote escape", `{"a":"\'"}`, Fields{}, `invalid character '\'' in string escape code`},
		{"bad unicode escape", `{"a":"\u12g4"}`, Fields{}, `invalid JSON at byte 10: invalid character 'g' in \u hexadecimal character escape`},
		{"upper U escape", `{"a":"\U0041"}`, Fields{}, "in string escape code"},
		{"escape in key", `{"\q":1}`, Fields{}, "in string escape code"},

		// Depth.
		{"deep but allowed", `{"a":` + strings.Repeat("[", jsonscan.MaxDepth-1) + strings.Repeat("]", jsonscan.MaxDepth-1) + `,"type":"deep"}`,
			Fields{Type: "deep", TypeKind: KindString}, ""},
		{"too deep", `{"a":` + strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth) + `}`, Fields{}, "exceeded max depth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ScanEvent([]byte(tt.in))
			if tt.err == "" && tt.want.Unit == "" {
				tt.want.Unit = layout.NoUnit // an object without the unit's path
			}
			if tt.err == "" {
				if err != nil {
					t.Fatalf("ScanEvent(%.80q) error: %v", tt.in, err)
				}
				if got != tt.want {
					t.Fatalf("ScanEvent(%.80q) = %+q, want %+q", tt.in, got, tt.want)
				}
			} else {
				if err == nil {
					t.Fatalf("ScanEvent(%.80q) = %+q, want error containing %q", tt.in, got, tt.err)
				}
				if !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ScanEvent(%.80q) error %q, want it to contain %q", tt.in, err, tt.err)
				}
				if got != (Fields{}) {
					t.Fatalf("ScanEvent(%.80q) returned %+q with the error", tt.in, got)
				}
			}
			checkAgainstEncodingJSON(t, []byte(tt.in), got, err)
		})
	}
}

func TestScanEventErrNotObject(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`[]`, `"s"`, `1`, `true`, `false`, `null`} {
		if _, err := ScanEvent([]byte(in)); !errors.Is(err, ErrNotObject) {
			t.Errorf("ScanEvent(%q) error %v, want ErrNotObject", in, err)
		}
	}
	if _, err := ScanEvent([]byte(`[`)); errors.Is(err, ErrNotObject) {
		t.Errorf("ScanEvent(%q) error %v: invalid JSON must not be ErrNotObject", `[`, err)
	}
}

// TestScanEventAllocs is not parallel: AllocsPerRun counts the allocations of the whole process.
func TestScanEventAllocs(t *testing.T) {
	cases := map[string]struct {
		in  string
		max float64
	}{
		"realistic":          {benchEvent, 1},
		"unit":               {unitEvent, 1}, // the unit token shares the one allocation
		"unit mapped":        {`{"id":"a","observation":{"observedLoadingUnit":{"loadingUnit":{"number":"msku 1"}}}}`, 2},
		"no routing strings": {`{"type":null,"a":{"id":"x"}}`, 0},
		"escaped value":      {`{"id":"caf\u00e9","type":"a\nb","timestamp":"t"}`, 1},
		"escaped key":        {`{"\u0074ype":"x"}`, 1},
		"deep":               {strings.Repeat(`{"a":`, 1000) + `1` + strings.Repeat(`}`, 1000), 1}, // the depth stack grows once
	}
	for name, c := range cases {
		data := []byte(c.in)
		got := testing.AllocsPerRun(100, func() {
			if _, err := ScanEvent(data); err != nil {
				t.Fatal(err)
			}
		})
		if got > c.max {
			t.Errorf("%s: %v allocations per ScanEvent, want at most %v", name, got, c.max)
		}
	}
}

// checkAgainstEncodingJSON checks ScanEvent's result for data against encoding/json: validity must equal
// json.Valid plus "the top-level value is an object", and the fields must be what decoding into
// map[string]json.RawMessage and then each member into a string gives.
func checkAgainstEncodingJSON(t *testing.T, data []byte, got Fields, err error) {
	t.Helper()
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	valid := json.Valid(data)
	isObject := valid && trimmed[0] == '{'
	if (err == nil) != isObject {
		t.Fatalf("ScanEvent(%q) error = %v, but json.Valid = %v (object: %v)", data, err, valid, isObject)
	}
	if err != nil {
		if errors.Is(err, ErrNotObject) != valid {
			t.Fatalf("ScanEvent(%q) error = %v; json.Valid = %v", data, err, valid)
		}
		var se *jsonscan.SyntaxError
		if errors.As(err, &se) && (se.Offset < 0 || se.Offset > len(data)) {
			t.Fatalf("ScanEvent(%q) error offset %d out of range", data, se.Offset)
		}
		return
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("json.Unmarshal(%q) into a map: %v", data, err)
	}
	member := func(key string) (string, Kind) {
		raw, ok := m[key]
		if !ok {
			return "", KindMissing
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || bytes.TrimSpace(raw)[0] != '"' {
			return "", KindOther
		}
		return s, KindString
	}
	var want Fields
	want.ID, _ = member("id")
	want.Type, want.TypeKind = member("type")
	want.Timestamp, _ = member("timestamp")
	want.Unit = unitByEncodingJSON(m)
	if got != want {
		t.Fatalf("ScanEvent(%q) = %+q, encoding/json gives %+q", data, got, want)
	}
}

// unitByEncodingJSON returns the unit token of the event decoded into m, following the path one object at
// a time with encoding/json (which keeps the last of duplicate keys, as ScanEvent does).
func unitByEncodingJSON(m map[string]json.RawMessage) string {
	for _, step := range []string{"observation", "observedLoadingUnit", "loadingUnit"} {
		raw, ok := m[step]
		if !ok || bytes.TrimSpace(raw)[0] != '{' {
			return layout.NoUnit
		}
		m = nil
		if err := json.Unmarshal(raw, &m); err != nil {
			return layout.NoUnit
		}
	}
	raw, ok := m["number"]
	var number string
	if !ok || bytes.TrimSpace(raw)[0] != '"' || json.Unmarshal(raw, &number) != nil {
		return layout.NoUnit
	}
	return layout.UnitToken(number)
}

// TestScanEventRandom compares ScanEvent with encoding/json on generated objects made of tricky pieces
// (escaped and duplicate keys, surrogates, invalid UTF-8, nesting), whole and damaged.
func TestScanEventRandom(t *testing.T) {
	t.Parallel()
	keys := []string{`id`, `type`, `timestamp`, `Type`, `typ\u0065`, `\u0069d`, `t\u0079pe\u0000`, "typ\xff",
		`time\/stamp`, `x`, ``, `\u0074\u0069\u006d\u0065\u0073\u0074\u0061\u006d\u0070`,
		`observation`, `observedLoadingUnit`, `loadingUnit`, `number`, `\u006fbservation`, `numbe\u0072`}
	pieces := []string{`a`, `2024-05-14T09:31:27Z`, `\n`, `\"`, `\\`, `\/`, `\u00e9`, `\u20AC`, `\ud83d`, `\ude9a`,
		`\uD83D\uDE9A`, `\u0000`, `\b\f\r\t`, "\xff", "\xc3", "\xc3\xa9", "\xed\xa0\x80", "\xf0\x9f\x9a\x9a", `é`,
		strings.Repeat("z", 9)}
	scalars := []string{`null`, `true`, `false`, `0`, `-1.5e+3`, `{}`, `[]`, `[1,"x",null]`, `{"type":"nested"}`,
		`{"observedLoadingUnit":{"loadingUnit":{"number":"msku 1"}}}`, `{"loadingUnit":{"number":"A-2"}}`}
	rng := rand.New(rand.NewPCG(1, 2))
	var value func(depth int) string
	str := func() string {
		var b strings.Builder
		b.WriteByte('"')
		for range rng.IntN(5) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		b.WriteByte('"')
		return b.String()
	}
	object := func(depth int) string {
		var b strings.Builder
		b.WriteByte('{')
		for k := range rng.IntN(6) {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + keys[rng.IntN(len(keys))] + `":` + value(depth+1))
		}
		b.WriteByte('}')
		return b.String()
	}
	value = func(depth int) string {
		switch r := rng.IntN(10); {
		case r < 5:
			return str()
		case r < 8 || depth > 3:
			return scalars[rng.IntN(len(scalars))]
		default:
			return object(depth)
		}
	}
	for range 20000 {
		data := []byte(object(0))
		if !json.Valid(data) {
			t.Fatalf("generated invalid JSON %q", data)
		}
		got, err := ScanEvent(data)
		checkAgainstEncodingJSON(t, data, got, err)
		// Damage it: cut it short, or replace, insert or delete a byte.
		p := rng.IntN(len(data))
		var bad []byte
		switch rng.IntN(4) {
		case 0:
			bad = data[:p]
		case 1:
			bad = bytes.Clone(data)
			bad[p] = "\"\\{}[],:0-.eEu \x01\xff"[rng.IntN(17)]
		case 2:
			bad = append(append(bytes.Clone(data[:p]), "\"\\{}[],:0-.eEu \x01\xff"[rng.IntN(17)]), data[p:]...)
		default:
			bad = append(bytes.Clone(data[:p]), data[p+1:]...)
		}
		got, err = ScanEvent(bad)
		checkAgainstEncodingJSON(t, bad, got, err)
	}
}

func FuzzScanEvent(f *testing.F) {
	seeds := []string{
		benchEvent,
		`{"id":"a","type":"b","timestamp":"2024-01-02T03:04:05Z"}`,
		`{"observation":{"type":"inner"},"type":"outer"}`,
		unitEvent,
		`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"msku 123456-7","number":"\u0131x"}}}}`,
		`{"type":null}`, `{"type":1}`, `{"type":{}}`, `{"type":[]}`, `{"type":true}`,
		`{"type":"a","type":"b","type":null}`,
		`{"t\u0079pe":"x","\u0069d":"\ud83d\ude9a","timestamp":"\ud800\u0041\udc00"}`,
		`{"id":"\ud83d\ud83d\ude9a\"\\\/\b\f\n\r\t"}`,
		"{\"id\":\"\xff\xfe\xc3\",\"typ\xe9\":1}",
		` {} `, `{}x`, `[]`, `""`, `0`, `-0.0e-0`, `null`, ``, ` `,
		`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1e}`, `{"a":1E+5}`,
		"{\"a\":\"\x01\"}", `{"a":"\x"}`, `{"a":"\u00zz"}`,
		`{"a":[1,2,{"b":[true,false,null]}]}`,
		`{"a":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`,
		`{"id":"abcdefghabcdefghabcdefgh\"abcdefgh","type":"abcdefg\u0041abcdefgh"}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ScanEvent(data)
		checkAgainstEncodingJSON(t, data, got, err)
	})
}

func BenchmarkScanEvent(b *testing.B) {
	data := []byte(benchEvent)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ScanEvent(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSONValid(b *testing.B) {
	data := []byte(benchEvent)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if !json.Valid(data) {
			b.Fatal("invalid")
		}
	}
}

// TestEventScanOnce: an event's data is scanned once, when it is read; the skip check after a restart
// (which needs the JSON id of an event without an SSE id) and the message take what they need from that
// one read.
func TestEventScanOnce(t *testing.T) {
	t.Parallel()
	var p Publisher
	ev := upstream.Event{Data: []byte(benchEvent)}
	in := p.read(&ev)
	if got, want := in.id, HeaderID("evt_01HZX3K9M2Q7R8S4T5V6W7X8Y9"); got != want {
		t.Fatalf("read: id %q, want %q", got, want)
	}
	ev.Data = []byte("not json") // a second scan would now fail
	if f := in.fields; in.err != nil || f.Type != "truck.position.updated" || f.TypeKind != KindString ||
		in.token != "truck_position_updated" {
		t.Errorf("read = %+v, %v, token %q", f, in.err, in.token)
	}
}

// unitEvent is an event shaped like the simulator's (and the provider's), of about 700 bytes, that names
// its loading unit.
const unitEvent = `{"id":"ev-0000000000184467","timestamp":"2026-11-22T10:00:00.125Z","type":"GATE_IN",` +
	`"observation":{"observedMeansOfTransport":{"modeOfTransport":"TRUCK","truck":{"countryCode":"DE",` +
	`"licensePlate":"HH-EX 4711","forwarder":"Nordfracht Logistik GmbH"}},"observedLoadingUnit":` +
	`{"loadingUnit":{"containerClass":"CONTAINER","identification":"BIC","number":"MSKU1234565",` +
	`"sizeType":"45G1"},"loadingState":"FULL","condition":"OK","weight":{"gross":18200,"net":14400,` +
	`"tare":3800},"seals":[{"type":"OPERATOR","number":"ML-DE4100037"},{"type":"CUSTOMS","number":` +
	`"DE41000074"}]},"location":{"id":"DEHAM-CTA","type":"SEAPORT_TERMINAL","name":"Container Terminal ` +
	`Altenwerder","address":{"street":"Am Ballinkai 1","postalCode":"21129","city":"Hamburg","country":` +
	`{"code":"DE"}},"geoLocation":{"latitude":53.5,"longitude":9.93}}}}`

func BenchmarkScanEventUnit(b *testing.B) {
	data := []byte(unitEvent)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ScanEvent(data); err != nil {
			b.Fatal(err)
		}
	}
}
