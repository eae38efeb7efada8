package consume

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tracking-bridge/tracking-bridge/api"
	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// Schema is a schema of the OpenAPI document (package api) compiled with the document's own strictness,
// for a request body the bridge sends upstream on a client's behalf: the same conversion as the report
// consumer's, so both read the document alike, without the report policy's leniency.
type Schema struct{ c *compiledReport }

// CompileSchema compiles the document's schema name (a key of components.schemas, like "BookingOrder");
// noun names the whole body in problems ("the booking order").
func CompileSchema(name, noun string) (*Schema, error) {
	c, err := compile(name, noun, true)
	if err != nil {
		return nil, err
	}
	return &Schema{c: c}, nil
}

// Validate returns every problem of body in Validate's words ("unit.loadingState is missing"), in the
// order of the body, or nil when there is none. It is safe for concurrent use.
func (s *Schema) Validate(body []byte) []string {
	if len(bytes.TrimSpace(body)) == 0 {
		return []string{s.c.noun + " is empty; a " + s.c.name + " JSON object is expected"}
	}
	if !utf8.Valid(body) {
		return []string{s.c.noun + " is not valid UTF-8"}
	}
	return s.c.validate(body)
}

// reportSchemaURL names the compiled JSON Schema; error locations start with it.
const reportSchemaURL = "urn:tracking-bridge:report"

// compiledReport is the TrackingEventReport schema compiled once, with the display names of the fields
// whose JSON type a problem names more precisely than the schema's type (a date-time, an int32).
type compiledReport struct {
	name   string // the schema's name in the document, "TrackingEventReport"
	noun   string // how whole-body problems name the body, "the report"
	schema *jsonschema.Schema
	fast   []field           // the walker's table of the same schema (fastpath.go); nil: no fast path
	kinds  map[string]string // schema location ("/$defs/TrackingEvent/properties/timestamp") → "a date-time string (RFC 3339)"
}

var reportSchema = sync.OnceValue(func() *compiledReport {
	c, err := compile("TrackingEventReport", "the report", false)
	if err != nil {
		panic(err) // the document is embedded and tested: this is a bug, not bad input
	}
	return c
})

// Errors of the int32 format, told apart in the problems they give.
var (
	errNotInteger = errors.New("not an integer")
	errInt32Range = errors.New("out of the int32 range")
)

// compile turns the document's schema name, with every schema it refers to, into a JSON Schema (draft
// 2020-12) and compiles it with the formats Validate checks by hand. strict selects the converter's
// request policy (see converter); the report's policy has a fast path too.
func compile(name, noun string, strict bool) (*compiledReport, error) {
	doc, err := api.Document()
	if err != nil {
		return nil, err
	}
	if doc.Components.Schemas[name] == nil {
		return nil, fmt.Errorf("the document has no schema %q", name)
	}
	cv := converter{schemas: doc.Components.Schemas, defs: map[string]any{}, kinds: map[string]string{}, strict: strict}
	root := cv.use(&openapi3.SchemaRef{Ref: "#/components/schemas/" + name}, "", true)
	root["$defs"] = cv.defs
	if cv.err != nil {
		return nil, cv.err
	}
	// The compiler wants a document as encoding/json or jsonschema.UnmarshalJSON decodes it.
	raw, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	jc := jsonschema.NewCompiler()
	jc.DefaultDraft(jsonschema.Draft2020)
	jc.AssertFormat()
	jc.RegisterFormat(&jsonschema.Format{Name: "date-time", Validate: validDateTime})
	jc.RegisterFormat(&jsonschema.Format{Name: "int32", Validate: validInt32})
	jc.RegisterFormat(&jsonschema.Format{Name: "integer", Validate: validInteger})
	jc.RegisterFormat(&jsonschema.Format{Name: "date", Validate: validDate})
	if err := jc.AddResource(reportSchemaURL, v); err != nil {
		return nil, err
	}
	s, err := jc.Compile(reportSchemaURL)
	if err != nil {
		return nil, fmt.Errorf("compile the %s schema: %w", name, err)
	}
	c := &compiledReport{name: name, noun: noun, schema: s, kinds: cv.kinds}
	if !strict {
		c.fast, err = fastFields(root)
		if err != nil {
			c.fast = nil // correct without it, only slower; TestFastPathDerived keeps it there
		}
	}
	return c, nil
}

// converter translates OpenAPI 3.0 schemas into JSON Schema with the bridge's policy for reports:
//
//   - an optional property may be null, as if absent (the upstream takes either); a required one, or an
//     array item, may not unless the document says nullable;
//   - the shape is checked (required fields, JSON types, int32, date-time, array bounds), not the
//     values: enumerations (the provider may add values), string lengths and patterns, minimum and
//     maximum are left to the upstream, which answers 400 for a value it does not take, dead-lettered
//     like any other rejection. Minimum and maximum would also be compared with big.Rat, far too slowly
//     for a number like 1e999999999 that a producer can send;
//   - the JSON type sits at each use of a schema rather than in its definition, so that a nullable use
//     of an object schema accepts null; a definition's keywords apply to values of its type only.
//
// An integer becomes a number of the format int32 (or integer, without a bound), checked with strconv
// by validInt32 rather than by the validator's big.Rat, for the same reason.
//
// The strict policy, for requests the bridge sends upstream on a client's behalf (CompileSchema), is the
// document's own: null only where it says nullable, and enumerations, string lengths, patterns, minimum
// and maximum checked, so that the bridge refuses what the upstream would refuse and nothing more.
type converter struct {
	schemas openapi3.Schemas
	defs    map[string]any
	kinds   map[string]string
	strict  bool
	err     error
}

// use returns the JSON Schema of one use of ref at schema location loc: its type (with null when
// nullable) and, for a named schema, a $ref to its definition.
func (cv *converter) use(ref *openapi3.SchemaRef, loc string, required bool) map[string]any {
	nullable := !required && !cv.strict
	// allOf of one named schema with nullable beside it, a common way of writing "X or null" in OpenAPI
	// 3.0, is read as that schema, nullable. The document does not use it (a strict reader keeps the
	// named schema's own type and refuses null): it makes such a schema nullable itself.
	if ref.Ref == "" && ref.Value != nil && len(ref.Value.AllOf) == 1 && ref.Value.AllOf[0].Ref != "" {
		nullable = nullable || ref.Value.Nullable
		ref = ref.Value.AllOf[0]
	}
	s := ref.Value
	if ref.Ref != "" {
		name, ok := strings.CutPrefix(ref.Ref, "#/components/schemas/")
		if !ok || cv.schemas[name] == nil {
			cv.err = fmt.Errorf("unsupported $ref %q", ref.Ref)
			return map[string]any{}
		}
		s = cv.schemas[name].Value
		if _, done := cv.defs[name]; !done {
			cv.defs[name] = map[string]any{} // placeholder against cycles
			cv.defs[name] = cv.body(s, "/$defs/"+name)
		}
	}
	if s == nil {
		cv.err = fmt.Errorf("empty schema at %q", loc)
		return map[string]any{}
	}
	out := map[string]any{}
	if ref.Ref != "" {
		out["$ref"] = "#/$defs/" + strings.TrimPrefix(ref.Ref, "#/components/schemas/")
	} else {
		out = cv.body(s, loc)
	}
	nullable = nullable || s.Nullable
	var types []any
	for _, t := range s.Type.Slice() {
		switch {
		case t == openapi3.TypeInteger:
			types = append(types, "number")
			cv.kinds[loc] = "an integer"
		case t == openapi3.TypeString && s.Format == "date-time":
			types = append(types, t)
			cv.kinds[loc] = "a date-time string (RFC 3339)"
		default:
			types = append(types, t)
		}
	}
	if len(types) == 1 && nullable {
		types = append(types, "null")
	}
	if len(types) > 0 {
		out["type"] = types
	}
	return out
}

// body returns the keywords of s other than its type.
func (cv *converter) body(s *openapi3.Schema, loc string) map[string]any {
	out := map[string]any{}
	switch {
	case s.Format == "date-time":
		out["format"] = "date-time"
	case s.Format == "date" && cv.strict:
		out["format"] = "date"
	case s.Type.Is(openapi3.TypeInteger) && s.Format == "int32":
		out["format"] = "int32"
	case s.Type.Is(openapi3.TypeInteger):
		out["format"] = "integer"
	}
	if len(s.Properties) > 0 {
		props := map[string]any{}
		for name, p := range s.Properties {
			props[name] = cv.use(p, loc+"/properties/"+name, contains(s.Required, name))
		}
		out["properties"] = props
	}
	if len(s.Required) > 0 {
		out["required"] = s.Required
	}
	if s.Items != nil {
		out["items"] = cv.use(s.Items, loc+"/items", true)
	}
	if s.MaxItems != nil {
		out["maxItems"] = *s.MaxItems
	}
	if cv.strict {
		cv.values(s, out)
	}
	return out
}

// values adds the keywords of the strict policy that constrain values rather than the shape.
func (cv *converter) values(s *openapi3.Schema, out map[string]any) {
	if len(s.Enum) > 0 {
		// With null: whether null is taken is the type's say, at each use (a nullable use of an enum).
		out["enum"] = append(slices.Clip(s.Enum), nil)
	}
	if s.MinItems > 0 {
		out["minItems"] = s.MinItems
	}
	if s.MinLength > 0 {
		out["minLength"] = s.MinLength
	}
	if s.MaxLength != nil {
		out["maxLength"] = *s.MaxLength
	}
	if s.Pattern != "" {
		out["pattern"] = s.Pattern
	}
	if s.Min != nil {
		out["minimum"] = *s.Min
	}
	if s.Max != nil {
		out["maximum"] = *s.Max
	}
	if s.ExclusiveMin.IsSet() || s.ExclusiveMax.IsSet() {
		cv.err = errors.New("exclusiveMinimum and exclusiveMaximum are not supported")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validDateTime is the date-time format: RFC 3339 section 5.6 strictly (internal/rfc3339), as the
// walker this validator replaced checked it, rather than the validator's own reading.
func validDateTime(v any) error {
	if s, ok := v.(string); ok && !rfc3339.Valid(s) {
		return errors.New("not an RFC 3339 date-time")
	}
	return nil
}

// validDate is the date format (RFC 3339 full-date), a real calendar date as kin-openapi checks it.
func validDate(v any) error {
	if s, ok := v.(string); ok {
		if _, err := time.Parse(time.DateOnly, s); err != nil {
			return errors.New("not an RFC 3339 full-date")
		}
	}
	return nil
}

// validInteger is the integer format of a number: 1e3 and 12.0 are integers, 1.5 is not.
func validInteger(v any) error {
	if err := validInt32(v); errors.Is(err, errNotInteger) {
		return err
	}
	return nil
}

// validInt32 is the int32 format of a number: an integer (1e3 and 12.0 are) in the int32 range.
func validInt32(v any) error {
	n, ok := v.(json.Number)
	if !ok {
		return nil
	}
	s := string(n)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i < math.MinInt32 || i > math.MaxInt32 {
			return errInt32Range
		}
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange) || f != math.Trunc(f):
		return errNotInteger
	case err != nil || f < math.MinInt32 || f > math.MaxInt32:
		return errInt32Range
	}
	return nil
}
