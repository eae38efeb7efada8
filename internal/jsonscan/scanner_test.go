package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// event is a realistic tracking event of about 1 KB.
const event = `{"id":"evt_01HZX3K9M2Q7R8S4T5V6W7X8Y9","type":"truck.position.updated",` +
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

// TestErrors: the error of invalid input names the offset and the problem in encoding/json's words,
// whether the scanner walks the value or skips it.
func TestErrors(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{``, "invalid JSON at byte 0: unexpected end of input"},
		{" \n\t ", "invalid JSON at byte 4: unexpected end of input"},
		{`[1,]`, "invalid JSON at byte 3: invalid character ']' looking for beginning of value"},
		{`{"id":"a"}x`, "invalid JSON at byte 10: invalid character 'x' after top-level value"},
		{`{} {}`, "invalid JSON at byte 3: invalid character '{' after top-level value"},
		{`{"a":1,}`, "invalid JSON at byte 7: invalid character '}' looking for beginning of object key string"},
		{`{"id":"ab`, "invalid JSON at byte 9: unexpected end of input"},
		{`{"id"`, "invalid JSON at byte 5: unexpected end of input"},
		{`{"a":[{"b":[]}`, "invalid JSON at byte 14: unexpected end of input"},
		{`{"a" 1}`, "invalid JSON at byte 5: invalid character '1' after object key"},
		{`{"a":1 "b":2}`, "invalid JSON at byte 7: invalid character '\"' after object key:value pair"},
		{`{"a":[1 2]}`, "invalid JSON at byte 8: invalid character '2' after array element"},
		{`{"a":[1}`, "invalid JSON at byte 7: invalid character '}' after array element"},
		{`{a:1}`, "invalid JSON at byte 1: invalid character 'a' looking for beginning of object key string"},
		{`{'a':1}`, `invalid JSON at byte 1: invalid character '\'' looking for beginning of object key string`},
		{`{"a":nul}`, "invalid JSON at byte 8: invalid character '}' in literal null (expecting 'l')"},
		{`{"a":True}`, "invalid JSON at byte 5: invalid character 'T' looking for beginning of value"},
		{`{"a":01}`, "invalid JSON at byte 6: invalid character '1' after object key:value pair"},
		{`01`, "invalid JSON at byte 1: invalid character '1' after top-level value"},
		{`{"a":1.}`, "invalid JSON at byte 7: invalid character '}' after decimal point in numeric literal"},
		{`{"a":-}`, "invalid JSON at byte 6: invalid character '}' in numeric literal"},
		{`-`, "invalid JSON at byte 1: unexpected end of input"},
		{`{"a":1e}`, "invalid JSON at byte 7: invalid character '}' in exponent of numeric literal"},
		{"{\"a\":\"x\ny\"}", `invalid JSON at byte 7: invalid character '\x0a' in string literal`},
		{`{"a":"\x"}`, "invalid JSON at byte 7: invalid character 'x' in string escape code"},
		{`{"a":"\u12g4"}`, `invalid JSON at byte 10: invalid character 'g' in \u hexadecimal character escape`},
		{`{"\q":1}`, "invalid JSON at byte 3: invalid character 'q' in string escape code"},
		{strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), ""},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), "invalid JSON at byte 10000: exceeded max depth of 10000"},
		{`{"a":` + strings.Repeat(`{"a":`, MaxDepth-1) + `1` + strings.Repeat("}", MaxDepth), ""},
		{`{"a":` + strings.Repeat(`{"a":`, MaxDepth) + `1` + strings.Repeat("}", MaxDepth+1), "exceeded max depth of 10000"},
	} {
		for _, walk := range []bool{false, true} {
			var s Scanner
			s.Reset([]byte(tc.in))
			if walk {
				decode(&s)
			} else {
				s.Skip()
			}
			err := s.End()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("%.40q (walked: %v): error %v, want %q", tc.in, walk, err, tc.err)
			}
			var se *SyntaxError
			if err != nil && !errors.As(err, &se) {
				t.Errorf("%.40q: error %T, want a *SyntaxError", tc.in, err)
			}
		}
	}
}

// TestWalk reads an object's members as a caller does: Kind, then String, Number, a container, or Skip.
func TestWalk(t *testing.T) {
	var s Scanner
	s.Reset([]byte(` {"id" : "a\u00e9" , "n":-1.5e3, "tags":["x", {"k":null}], "ok":true, "t\u0079pe":"x"} `))
	var got []string
	if !s.Object() {
		t.Fatal(s.Err())
	}
	for key, esc, ok := s.Member(); ok; key, esc, ok = s.Member() {
		k := Unquote(key, esc)
		switch s.Kind() {
		case String:
			got = append(got, k+"="+Unquote(s.String()))
		case Number:
			got = append(got, k+"#"+string(s.Number()))
		case Array:
			s.Array()
			n := 0
			for s.Elem() {
				s.Skip()
				n++
			}
			got = append(got, k+"[]"+strings.Repeat("x", n))
		default:
			got = append(got, k+":"+string(s.Skip()))
		}
	}
	if err := s.End(); err != nil {
		t.Fatal(err)
	}
	want := []string{"id=aé", "n#-1.5e3", "tags[]xx", "ok:true", "type=x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestWrongKind: asking for another kind than comes next is an error, not a panic or a silent skip.
func TestWrongKind(t *testing.T) {
	for _, read := range []func(*Scanner){
		func(s *Scanner) { s.String() },
		func(s *Scanner) { s.Number() },
		func(s *Scanner) { s.Object() },
		func(s *Scanner) { s.Array() },
	} {
		var s Scanner
		s.Reset([]byte(`true`))
		read(&s)
		var ke *KindError
		if !errors.As(s.Err(), &ke) || ke.Got != True || ke.Offset != 0 {
			t.Errorf("reading true as another kind: %v", s.Err())
		}
	}
}

func TestEqualFold(t *testing.T) {
	for _, tc := range []struct {
		key         string
		exact, fold bool
	}{
		{`stream`, true, true},
		{`Stream`, false, true},
		{`STREAM`, false, true},
		{`ſtream`, false, true}, // U+017F folds to s
		{`\u017ftream`, false, true},
		{`\u0073tream`, true, true},
		{`streams`, false, false},
		{`strea`, false, false},
		{"str\xffam", false, false},
		{`stre\u0000m`, false, false},
		{`\u0053\u0054\u0052\u0045\u0041\u004d`, false, true},
		{`\u0053\u0054\u0052\u0045\u0041\u004d `, false, false},
	} {
		raw := []byte(tc.key)
		esc := bytes.IndexByte(raw, '\\') >= 0
		if got := Equal(raw, esc, "stream"); got != tc.exact {
			t.Errorf("Equal(%q) = %v", tc.key, got)
		}
		if got := EqualFold(raw, esc, "stream"); got != tc.fold {
			t.Errorf("EqualFold(%q) = %v", tc.key, got)
		}
		var s struct {
			Stream *string `json:"stream"`
		}
		if err := json.Unmarshal([]byte(`{"`+tc.key+`":"x"}`), &s); err != nil {
			t.Fatal(err)
		}
		if (s.Stream != nil) != tc.fold {
			t.Errorf("encoding/json matches %q to stream: %v", tc.key, s.Stream != nil)
		}
	}
	for _, k := range []string{`id`, `type`, `timestamp`, `duplicate`} {
		if n := testing.AllocsPerRun(10, func() { EqualFold([]byte(`\u0078`+k), true, k) }); n != 0 {
			t.Errorf("EqualFold(%s): %v allocations", k, n)
		}
	}
}

func TestAllocs(t *testing.T) {
	data := []byte(event)
	if n := testing.AllocsPerRun(100, func() {
		var s Scanner
		s.Reset(data)
		s.Object()
		for _, _, ok := s.Member(); ok; _, _, ok = s.Member() {
			s.Skip()
		}
		if s.End() != nil {
			t.Fatal(s.Err())
		}
	}); n != 0 {
		t.Errorf("%v allocations per scan, want 0", n)
	}
}

// decode reads the value that comes next into what encoding/json decodes it to (with UseNumber), by
// walking it with every method but Skip (except for literals).
func decode(s *Scanner) any {
	switch s.Kind() {
	case Object:
		m := map[string]any{}
		s.Object()
		for key, esc, ok := s.Member(); ok; key, esc, ok = s.Member() {
			m[Unquote(key, esc)] = decode(s)
		}
		return m
	case Array:
		a := []any{}
		s.Array()
		for s.Elem() {
			a = append(a, decode(s))
		}
		return a
	case String:
		return Unquote(s.String())
	case Number:
		return json.Number(s.Number())
	case True:
		s.Skip()
		return true
	case False:
		s.Skip()
		return false
	case Null:
		s.Skip()
	}
	return nil
}

// pubAckish is what the bridge reads from a JetStream PubAck, and the routing members of an event.
type pubAckish struct {
	Stream, Seq, Duplicate, Error, ID, Type, Timestamp json.RawMessage
}

var pubAckNames = []string{"stream", "seq", "duplicate", "error", "id", "type", "timestamp"}

// members reads the top-level members of the object that comes next as encoding/json does into a map
// (exact keys, the last of duplicates) and into pubAckish (keys matched case-insensitively), with Skip.
func members(s *Scanner) (map[string]json.RawMessage, pubAckish) {
	m := map[string]json.RawMessage{}
	var fields [7]json.RawMessage
	s.Object()
	for key, esc, ok := s.Member(); ok; key, esc, ok = s.Member() {
		k := -1
		for j, name := range pubAckNames {
			if EqualFold(key, esc, name) {
				k = j
			}
		}
		raw := s.Skip()
		m[Unquote(key, esc)] = raw
		if k >= 0 {
			fields[k] = raw
		}
	}
	return m, pubAckish{fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], fields[6]}
}

// check compares the scanner with encoding/json on data: validity, the decoded value, the top-level
// members' text under exact and case-insensitive keys, and the errors of walking and of skipping.
func check(t *testing.T, data []byte) {
	t.Helper()
	valid := json.Valid(data)
	if got := Valid(data); got != valid {
		t.Fatalf("Valid(%q) = %v, json.Valid %v", data, got, valid)
	}
	var s Scanner
	s.Reset(data)
	got := decode(&s)
	walkErr := s.End()
	s.Reset(data)
	raw := s.Skip()
	skipErr := s.End()
	if (walkErr == nil) != valid || (skipErr == nil) != valid {
		t.Fatalf("%q: walking: %v, skipping: %v; json.Valid %v", data, walkErr, skipErr, valid)
	}
	if !valid {
		if walkErr.Error() != skipErr.Error() {
			t.Fatalf("%q: walking: %v, skipping: %v", data, walkErr, skipErr)
		}
		if se := walkErr.(*SyntaxError); se.Offset < 0 || se.Offset > len(data) {
			t.Fatalf("%q: offset %d out of range", data, se.Offset)
		}
		return
	}
	if !bytes.Equal(raw, bytes.Trim(data, " \t\r\n")) {
		t.Fatalf("Skip(%q) = %q", data, raw)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var want any
	if err := d.Decode(&want); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: scanned %#v, encoding/json %#v", data, got, want)
	}
	if raw[0] != '{' {
		return
	}
	s.Reset(data)
	gotMap, gotFields := members(&s)
	if err := s.End(); err != nil {
		t.Fatalf("%q: %v", data, err)
	}
	var wantMap map[string]json.RawMessage
	var wantFields pubAckish
	if err := json.Unmarshal(data, &wantMap); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &wantFields); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotMap, wantMap) {
		t.Fatalf("%q: members %q, encoding/json %q", data, gotMap, wantMap)
	}
	if !reflect.DeepEqual(gotFields, wantFields) {
		t.Fatalf("%q: fields %q, encoding/json %q", data, gotFields, wantFields)
	}
}

// FuzzScanner is the scanner's one comparison with encoding/json: validity and the error's offset,
// every value decoded by walking (strings with escapes, surrogates and invalid UTF-8; numbers as
// written; nesting to MaxDepth), and the top-level members read with Skip, under exact keys (an event's
// "id" and "type") and under encoding/json's case-insensitive struct keys (a PubAck's "stream", "seq",
// "duplicate" and "error"). Run: go test -fuzz FuzzScanner ./internal/jsonscan/
func FuzzScanner(f *testing.F) {
	for _, s := range []string{
		event,
		`{"id":"a","type":"b","timestamp":"2024-01-02T03:04:05Z"}`,
		`{"observation":{"type":"inner"},"type":"outer"}`,
		`{"type":null}`, `{"type":1}`, `{"type":{}}`, `{"type":[]}`, `{"type":true}`,
		`{"type":"a","type":"b","type":null}`,
		`{"t\u0079pe":"x","\u0069d":"\ud83d\ude9a","timestamp":"\ud800\u0041\udc00"}`,
		`{"id":"\ud83d\ud83d\ude9a\"\\\/\b\f\n\r\t"}`,
		"{\"id\":\"\xff\xfe\xc3\",\"typ\xe9\":1}",
		`{"stream":"S","seq":1}`, `{"stream":"S","seq":1,"duplicate":true}`,
		`{"Stream":"S","SEQ":1,"ſtream":"T","Duplicate":false,"duplicate":null}`,
		`{"error":{"code":503,"err_code":10077,"description":"x"},"stream":"S","seq":0}`,
		` {} `, `{}x`, `[]`, `""`, `0`, `-0.0e-0`, `null`, ``, ` `, `[1,[2,[3]],{"a":[]}]`,
		`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1e}`, `{"a":1E+5}`,
		"{\"a\":\"\x01\"}", `{"a":"\x"}`, `{"a":"\u00zz"}`,
		`{"a":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`,
		`{"id":"abcdefghabcdefghabcdefgh\"abcdefgh","type":"abcdefg\u0041abcdefgh"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(check)
}

func TestCheck(t *testing.T) {
	for _, in := range []string{event, `{"a":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}`,
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)} {
		check(t, []byte(in))
	}
}

// BenchmarkScanner reads a 1 KB event as the publisher does: its top-level members, the routing strings
// read and the rest skipped; and json.Valid on the same data, for scale.
func BenchmarkScanner(b *testing.B) {
	data := []byte(event)
	b.Run("members", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var s Scanner
			s.Reset(data)
			s.Object()
			for key, esc, ok := s.Member(); ok; key, esc, ok = s.Member() {
				if Equal(key, esc, "id") && s.Kind() == String {
					s.String()
				} else {
					s.Skip()
				}
			}
			if s.End() != nil {
				b.Fatal(s.Err())
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if !json.Valid(data) {
				b.Fatal("invalid")
			}
		}
	})
}
