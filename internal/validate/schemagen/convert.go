package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// convert turns the document's schema name, with every schema it refers to, into a JSON Schema (draft
// 2020-12) of the given policy (see converter): the use of the named schema at the root, the schemas it
// refers to under $defs. kinds maps the location of a use whose JSON type a problem names more precisely
// than the schema's type ("/$defs/TrackingEvent/properties/timestamp") to those words ("a date-time
// string (RFC 3339)").
func convert(doc *openapi3.T, name string, strict bool) (schema map[string]any, kinds map[string]string, err error) {
	if doc.Components.Schemas[name] == nil {
		return nil, nil, fmt.Errorf("the document has no schema %q", name)
	}
	cv := converter{schemas: doc.Components.Schemas, defs: map[string]any{}, kinds: map[string]string{}, strict: strict}
	root := cv.use(&openapi3.SchemaRef{Ref: "#/components/schemas/" + name}, "", true)
	root["$defs"] = cv.defs
	if cv.err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, cv.err)
	}
	return root, cv.kinds, nil
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
// (package validate's int32 format) rather than with big.Rat, for the same reason.
//
// The strict policy, for requests the bridge sends upstream on a client's behalf (BookingOrder), is the
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
			props[name] = cv.use(p, loc+"/properties/"+name, slices.Contains(s.Required, name))
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
