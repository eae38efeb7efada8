package validate

// The JSON Schema check the bridge used before the fast path, kept as a reference: schemas.json compiled by santhosh-tekuri/jsonschema
// (as the daemon did at start-up, then from the OpenAPI document), its error tree worded as the bridge
// words problems. TestReference and the Fuzz*Reference targets compare Report and BookingOrder with it,
// problem for problem and in the same order. Only this test links the JSON Schema library.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// refSchema is one schema of schemas.json compiled by the JSON Schema library.
type refSchema struct {
	schema *jsonschema.Schema
	kinds  map[string]string
}

const refURL = "urn:tracking-bridge:report"

var refSchemas = sync.OnceValues(func() (map[string]refSchema, error) {
	var f struct {
		Schemas map[string]struct {
			Schema json.RawMessage
			Kinds  map[string]string
		}
	}
	if err := json.Unmarshal(schemasJSON, &f); err != nil {
		return nil, err
	}
	out := map[string]refSchema{}
	for name, e := range f.Schemas {
		rs, err := compileReference(e.Schema, e.Kinds)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = rs
	}
	return out, nil
})

// compileReference compiles one schema as the daemon did: draft 2020-12, formats asserted, with the
// bridge's own date-time, date, int32 and integer formats.
func compileReference(schema json.RawMessage, kinds map[string]string) (refSchema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return refSchema{}, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.RegisterFormat(&jsonschema.Format{Name: "date-time", Validate: refDateTime})
	c.RegisterFormat(&jsonschema.Format{Name: "date", Validate: refDate})
	c.RegisterFormat(&jsonschema.Format{Name: "int32", Validate: refInt32})
	c.RegisterFormat(&jsonschema.Format{Name: "integer", Validate: refInteger})
	if err := c.AddResource(refURL, v); err != nil {
		return refSchema{}, err
	}
	s, err := c.Compile(refURL)
	if err != nil {
		return refSchema{}, err
	}
	return refSchema{schema: s, kinds: kinds}, nil
}

// The formats as the daemon registered them with the library.
func refDateTime(v any) error {
	if s, ok := v.(string); ok && !rfc3339.Valid(s) {
		return errors.New("not an RFC 3339 date-time")
	}
	return nil
}

func refDate(v any) error {
	if s, ok := v.(string); ok {
		if _, err := time.Parse(time.DateOnly, s); err != nil {
			return errors.New("not an RFC 3339 full-date")
		}
	}
	return nil
}

func refInteger(v any) error {
	if n, ok := v.(json.Number); ok && errors.Is(int32Error(string(n)), errNotInteger) {
		return errNotInteger
	}
	return nil
}

func refInt32(v any) error {
	if n, ok := v.(json.Number); ok {
		return int32Error(string(n))
	}
	return nil
}

// referenceReport and referenceBookingOrder are Report and BookingOrder with the reference check.
func referenceReport(body []byte, maxBytes int) []string {
	if ps := reportBody.prelude(body, maxBytes); ps != nil {
		return ps
	}
	return referenceCheck(body, reportBody)
}

func referenceBookingOrder(body []byte) []string {
	if ps := orderBody.prelude(body, 0); ps != nil {
		return ps
	}
	return referenceCheck(body, orderBody)
}

// referenceCheck is bodyType.check with the JSON Schema library.
func referenceCheck(body []byte, k bodyType) []string {
	schemas, err := refSchemas()
	if err != nil {
		panic(err)
	}
	return referenceCheckWith(schemas[k.name], k, body)
}

// referenceCheckWith is bodyType.checkWith with the JSON Schema library.
func referenceCheckWith(rs refSchema, k bodyType, body []byte) []string {
	m, bad := k.decode(body)
	if bad != nil {
		return bad
	}
	err := rs.schema.Validate(m)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{k.noun + " could not be validated: " + err.Error()}
	}
	var ps []problem
	var leaves func(e *jsonschema.ValidationError)
	leaves = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				leaves(c)
			}
			return
		}
		ps = append(ps, rs.describe(e, m)...)
	}
	leaves(ve)
	return words(body, ps)
}

// describe turns one leaf error into its problems (a missing-fields error gives one per field).
func (rs refSchema) describe(e *jsonschema.ValidationError, doc map[string]any) []problem {
	at := strings.Join(e.InstanceLocation, "\x00")
	path, v := instance(doc, e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		out := make([]problem, len(k.Missing))
		for i, name := range k.Missing {
			out[i] = problem{at: at, end: true, text: join(path, name) + " is missing"}
		}
		return out
	case *kind.Type:
		_, loc, _ := strings.Cut(e.SchemaURL, "#")
		want := rs.kinds[loc]
		if want == "" {
			for _, t := range k.Want {
				if t != "null" {
					want = article(t)
					break
				}
			}
		}
		return []problem{{at: at, text: fmt.Sprintf("%s must be %s, not %s", path, want, describe(v))}}
	case *kind.Format:
		switch {
		case k.Want == "date":
			s, _ := v.(string)
			return []problem{{at: at, text: fmt.Sprintf("%s is not a date (like 2024-05-01): %s", path, quote(s))}}
		case k.Want == "date-time":
			s, _ := v.(string)
			return []problem{{at: at, text: fmt.Sprintf("%s is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): %s", path, quote(s))}}
		case k.Want == "int32" && errors.Is(k.Err, errInt32Range):
			return []problem{{at: at, text: fmt.Sprintf("%s is out of the int32 range: %s", path, quote(numberText(v)))}}
		case k.Want == "int32" || k.Want == "integer":
			return []problem{{at: at, text: fmt.Sprintf("%s must be an integer, not %s", path, quote(numberText(v)))}}
		}
	case *kind.MaxItems:
		return []problem{{at: at, end: true, text: fmt.Sprintf("%s has %d items; at most %d are allowed", path, k.Got, k.Want)}}
	case *kind.MinItems:
		return []problem{{at: at, end: true, text: fmt.Sprintf("%s has %d items; at least %d are required", path, k.Got, k.Want)}}
	case *kind.Enum:
		var want []string
		for _, w := range k.Want {
			if w != nil {
				want = append(want, fmt.Sprint(w))
			}
		}
		return []problem{{at: at, text: fmt.Sprintf("%s must be one of %s, not %s", path, strings.Join(want, ", "), quoteValue(v))}}
	case *kind.MinLength:
		return []problem{{at: at, text: fmt.Sprintf("%s has %d characters; at least %d are required", path, k.Got, k.Want)}}
	case *kind.MaxLength:
		return []problem{{at: at, text: fmt.Sprintf("%s has %d characters; at most %d are allowed", path, k.Got, k.Want)}}
	case *kind.Pattern:
		return []problem{{at: at, text: fmt.Sprintf("%s does not match the pattern %s: %s", path, k.Want, quote(k.Got))}}
	case *kind.Minimum:
		return []problem{{at: at, text: fmt.Sprintf("%s must be at least %s, not %s", path, k.Want.RatString(), quote(numberText(v)))}}
	case *kind.Maximum:
		return []problem{{at: at, text: fmt.Sprintf("%s must be at most %s, not %s", path, k.Want.RatString(), quote(numberText(v)))}}
	}
	msg := strings.Join(strings.Fields(e.Error()), " ")
	return []problem{{at: at, text: path + ": " + msg}}
}

// instance returns the display path of a location ("event.observation.seals[3]") and the value there.
func instance(doc map[string]any, loc []string) (string, any) {
	var b strings.Builder
	var v any = doc
	for _, tok := range loc {
		switch c := v.(type) {
		case []any:
			b.WriteString("[" + tok + "]")
			var i int
			if _, err := fmt.Sscan(tok, &i); err == nil && i >= 0 && i < len(c) {
				v = c[i]
			}
		case map[string]any:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tok)
			v = c[tok]
		}
	}
	return b.String(), v
}

func numberText(v any) string {
	if n, ok := v.(json.Number); ok {
		return string(n)
	}
	return fmt.Sprint(v)
}

// bookingOrders are booking orders valid and invalid in every way the BookingOrder schema can tell.
var bookingOrders = []string{
	`{"terminalId":"T","action":"DROP_OFF","reference":"R","unit":{"loadingState":"EMPTY","handlingCode":null,"isoCode":"22G1",` +
		`"number":"MSKU1234565","dangerousGoodsIndication":"NOT_DANGEROUS","condition":"OK","seals":[{"type":"CUSTOMS","number":"S1"},{"number":"S2"}]},` +
		`"clientContext":{"plannedDate":{"date":"2024-02-29","timeOfDay":"EARLY"},"internalNote":"A-1/#2"}}`,
	`{"terminalId":"T","action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL","isoCode":"22G1"},"clientContext":{"plannedDate":null,"internalNote":null}}`,
	`{"terminalId":"T","action":"PICK_UP","reference":"R","clientContext":null,"unit":{"loadingState":"UNKNOWN","extra":"x"}}`,
	`{"terminalId":"T","action":"PARK","reference":"R","unit":{"loadingState":"HALF","isoCode":"22G1","seals":[{"type":"WAX"}]},` +
		`"clientContext":{"internalNote":"ABCDEFGHIJKLMNOPQRSTUVWXYZ"}}`,
	`{"terminalId":null,"action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL","isoCode":"22G1","condition":null,"seals":[null]}}`,
	`{"action":"PICK_UP","reference":7,"unit":{"seals":{}},"clientContext":{"plannedDate":{"date":"2023-02-29","timeOfDay":1}}}`,
	`{"terminalId":"T","action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL"},"clientContext":{"internalNote":"a b ä ö ü ß 12345678901234567890"}}`,
	`{"terminalId":"T","action":null,"reference":"R","unit":{"loadingState":"FULL","seals":[` + strings.Repeat(`{"type":"X"},`, 100) + `{"type":1}]}}`,
	`{"terminalId":"T","action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL","seals":[{},"s",[],{"type":null}]},"clientContext":{"plannedDate":{"date":"2024-13-01"}}}`,
	`{"terminalId":"T","action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL","dangerousGoodsIndication":true},"clientContext":{"plannedDate":{"date":20240101}}}`,
	`{"terminalId":"T","terminalId":1,"action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL"},"id":null}`,
	`[]`, `"x"`, `{`, `{} {}`, ``, "\xff",
}

// TestReference compares Report and BookingOrder with the reference on every body of the tests.
func TestReference(t *testing.T) {
	cases := slices.Clone(reportCases)
	for _, body := range []string{validReport, benchReport, seals(101, `{"number":1}`), seals(3, `{"number":1,"type":null}`)} {
		cases = append(cases, struct {
			name     string
			body     string
			maxBytes int
			want     []string
		}{body: body})
	}
	for _, tt := range cases {
		if got, want := Report([]byte(tt.body), tt.maxBytes), referenceReport([]byte(tt.body), tt.maxBytes); !slices.Equal(got, want) {
			t.Errorf("report %s\n     Report: %q\n  reference: %q", tt.body, got, want)
		}
	}
	for _, body := range bookingOrders {
		if got, want := BookingOrder([]byte(body)), referenceBookingOrder([]byte(body)); !slices.Equal(got, want) {
			t.Errorf("booking order %s\n  BookingOrder: %q\n     reference: %q", body, got, want)
		}
	}
}

// FuzzReportReference and FuzzBookingOrderReference check that Report and BookingOrder give the problems
// of the reference, in the same order.
func FuzzReportReference(f *testing.F) {
	f.Add([]byte(validReport))
	f.Add([]byte(benchReport))
	for _, tt := range reportCases {
		f.Add([]byte(tt.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := Report(body, 1<<16), referenceReport(body, 1<<16); !slices.Equal(got, want) {
			t.Fatalf("body %q\n     Report: %q\n  reference: %q", body, got, want)
		}
	})
}

func FuzzBookingOrderReference(f *testing.F) {
	for _, b := range bookingOrders {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := BookingOrder(body), referenceBookingOrder(body); !slices.Equal(got, want) {
			t.Fatalf("body %q\n  BookingOrder: %q\n     reference: %q", body, got, want)
		}
	})
}
