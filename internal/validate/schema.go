package validate

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// schemasJSON holds the request bodies the bridge checks, as JSON Schema (draft 2020-12) converted from
// the OpenAPI document api/openapi.yaml at build time by schemagen, with the bridge's policies (see
// schemagen/convert.go): the report's, which checks the shape and not the values, and the document's own
// strictness for a booking order.
//
//go:generate go run ./schemagen -o schemas.json
//go:embed schemas.json
var schemasJSON []byte

// node is one schema of schemas.json: the keywords that converter writes, which are the ones check
// knows. A use of a named schema has its JSON types and ref, the named schema's definition; the other
// keywords sit in the definition, or in the use itself when it names no schema.
type node struct {
	types jsonTypes // 0: any type
	want  string    // how a type problem names the wanted type: "an object", "a date-time string (RFC 3339)"
	ref   *node

	enum     []string // the values of an enumeration of strings; enumNull: null is one of them
	enumNull bool
	hasEnum  bool
	format   string // "date-time", "date", "int32" or "integer"

	props    map[string]*node
	required []string

	items              *node
	minItems, maxItems *int

	minLength, maxLength *int
	pattern              *regexp.Regexp

	minimum, maximum *big.Rat
}

// jsonTypes is a set of JSON types.
type jsonTypes uint8

const (
	tNull jsonTypes = 1 << iota
	tBoolean
	tNumber
	tString
	tArray
	tObject
)

// typeName is a JSON type and its name in JSON Schema.
type typeName struct {
	t    jsonTypes
	name string
}

// typeNames are the JSON types in the order JSON Schema validators list them.
var typeNames = []typeName{{tNull, "null"}, {tBoolean, "boolean"}, {tNumber, "number"}, {tString, "string"}, {tArray, "array"}, {tObject, "object"}}

// jsonType returns the JSON type of a value decoded with json.Decoder.UseNumber.
func jsonType(v any) jsonTypes {
	switch v.(type) {
	case nil:
		return tNull
	case bool:
		return tBoolean
	case json.Number:
		return tNumber
	case string:
		return tString
	case []any:
		return tArray
	case map[string]any:
		return tObject
	}
	return 0
}

// schemas are the bodies of schemas.json by name, loaded at the first check.
var schemas = sync.OnceValue(func() map[string]*node {
	m, err := load(schemasJSON)
	if err != nil {
		panic(err) // the file is embedded and tested: this is a bug, not bad input
	}
	return m
})

// load reads a file in the format of schemas.json.
func load(data []byte) (map[string]*node, error) {
	var f struct {
		Schemas map[string]struct {
			Schema map[string]any
			Kinds  map[string]string
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("validate: schemas: %w", err)
	}
	out := map[string]*node{}
	for name, e := range f.Schemas {
		l := loader{kinds: e.Kinds, defs: map[string]*node{}}
		l.raw, _ = e.Schema["$defs"].(map[string]any)
		n := l.node(e.Schema, "", true)
		if l.err != nil {
			return nil, fmt.Errorf("validate: schema %s: %w", name, l.err)
		}
		out[name] = n
	}
	return out, nil
}

// loader turns the JSON of one schema into nodes. A keyword it does not know is an error, so that no
// schema is checked more leniently than the document says.
type loader struct {
	kinds map[string]string
	raw   map[string]any   // the schema's $defs
	defs  map[string]*node // loaded definitions, by name
	err   error
}

func (l *loader) fail(loc, format string, args ...any) {
	if l.err == nil {
		l.err = fmt.Errorf("at %q: %s", loc, fmt.Sprintf(format, args...))
	}
}

// node loads the schema m found at location loc (a JSON pointer into the schema, as converter writes
// kinds' keys).
func (l *loader) node(m map[string]any, loc string, root bool) *node {
	n := &node{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		switch k {
		case "$defs":
			if !root {
				l.fail(loc, "$defs below the root")
			}
		case "type":
			l.types(n, v, loc)
		case "$ref":
			name, ok := strings.CutPrefix(fmt.Sprint(v), "#/$defs/")
			if !ok {
				l.fail(loc, "unsupported $ref %v", v)
				continue
			}
			n.ref = l.def(name)
		case "enum":
			n.hasEnum = true
			list, _ := v.([]any)
			for _, e := range list {
				switch e := e.(type) {
				case nil:
					n.enumNull = true
				case string:
					n.enum = append(n.enum, e)
				default:
					l.fail(loc, "an enumeration value that is not a string: %v", e)
				}
			}
		case "format":
			switch f := fmt.Sprint(v); f {
			case "date-time", "date", "int32", "integer":
				n.format = f
			default:
				l.fail(loc, "format %q", f)
			}
		case "properties":
			props, _ := v.(map[string]any)
			n.props = map[string]*node{}
			for name, p := range props {
				pm, _ := p.(map[string]any)
				n.props[name] = l.node(pm, loc+"/properties/"+name, false)
			}
		case "required":
			list, _ := v.([]any)
			for _, r := range list {
				n.required = append(n.required, fmt.Sprint(r))
			}
		case "items":
			im, _ := v.(map[string]any)
			n.items = l.node(im, loc+"/items", false)
		case "minItems":
			n.minItems = l.count(v, loc)
		case "maxItems":
			n.maxItems = l.count(v, loc)
		case "minLength":
			n.minLength = l.count(v, loc)
		case "maxLength":
			n.maxLength = l.count(v, loc)
		case "pattern":
			re, err := regexp.Compile(fmt.Sprint(v))
			if err != nil {
				l.fail(loc, "pattern: %v", err)
			}
			n.pattern = re
		case "minimum":
			n.minimum = l.number(v, loc)
		case "maximum":
			n.maximum = l.number(v, loc)
		default:
			l.fail(loc, "keyword %q", k)
		}
	}
	if n.types != 0 {
		n.want = l.kinds[loc]
		for _, tn := range typeNames {
			if n.want == "" && tn.t != tNull && n.types&tn.t != 0 {
				n.want = article(tn.name)
			}
		}
	}
	return n
}

// def returns the definition name, loading it the first time (a placeholder first, against cycles).
func (l *loader) def(name string) *node {
	if n, ok := l.defs[name]; ok {
		return n
	}
	m, ok := l.raw[name].(map[string]any)
	if !ok {
		l.fail("/$defs/"+name, "no such definition")
		return &node{}
	}
	n := &node{}
	l.defs[name] = n
	*n = *l.node(m, "/$defs/"+name, false)
	return n
}

func (l *loader) types(n *node, v any, loc string) {
	list, _ := v.([]any)
	for _, t := range list {
		i := slices.IndexFunc(typeNames, func(tn typeName) bool { return tn.name == t })
		if i < 0 {
			l.fail(loc, "type %v", t) // "integer" too: converter writes a number of the format int32 or integer
			continue
		}
		n.types |= typeNames[i].t
	}
}

func (l *loader) count(v any, loc string) *int {
	num, _ := v.(json.Number)
	i, err := strconv.Atoi(string(num))
	if err != nil || i < 0 {
		l.fail(loc, "not a count: %v", v)
	}
	return &i
}

func (l *loader) number(v any, loc string) *big.Rat {
	num, _ := v.(json.Number)
	r, ok := new(big.Rat).SetString(string(num))
	if !ok {
		l.fail(loc, "not a number: %v", v)
	}
	return r
}

// check appends the problems of v, found at location at (the instance location's tokens joined by
// "\x00") and shown as path, in the order a JSON Schema validator finds them: a value of the wrong type
// (or enumeration value, or format) gets that one problem; otherwise the definition's problems come
// first, then those of the value's own keywords and, for an object or array, its members'.
func (n *node) check(v any, at, path string, ps *[]problem) {
	t := jsonType(v)
	if n.types != 0 && n.types&t == 0 {
		*ps = append(*ps, problem{at: at, text: fmt.Sprintf("%s must be %s, not %s", path, n.want, describe(v))})
		return
	}
	if n.hasEnum && !n.inEnum(v) {
		*ps = append(*ps, problem{at: at, text: fmt.Sprintf("%s must be one of %s, not %s", path, strings.Join(n.enum, ", "), quoteValue(v))})
		return
	}
	if n.format != "" {
		if p, bad := n.checkFormat(v, path); bad {
			*ps = append(*ps, problem{at: at, text: p})
			return
		}
	}
	if n.ref != nil {
		n.ref.check(v, at, path, ps)
	}
	switch v := v.(type) {
	case map[string]any:
		for _, name := range n.required {
			if _, ok := v[name]; !ok {
				*ps = append(*ps, problem{at: at, end: true, text: join(path, name) + " is missing"})
			}
		}
		for name, pv := range v {
			if p := n.props[name]; p != nil {
				p.check(pv, joinAt(at, name), join(path, name), ps)
			}
		}
	case []any:
		if n.minItems != nil && len(v) < *n.minItems {
			*ps = append(*ps, problem{at: at, end: true, text: fmt.Sprintf("%s has %d items; at least %d are required", path, len(v), *n.minItems)})
		}
		if n.maxItems != nil && len(v) > *n.maxItems {
			*ps = append(*ps, problem{at: at, end: true, text: fmt.Sprintf("%s has %d items; at most %d are allowed", path, len(v), *n.maxItems)})
		}
		if n.items != nil {
			for i, item := range v {
				n.items.check(item, joinAt(at, strconv.Itoa(i)), path+"["+strconv.Itoa(i)+"]", ps)
			}
		}
	case string:
		if n.minLength != nil || n.maxLength != nil {
			length := utf8.RuneCountInString(v)
			if n.minLength != nil && length < *n.minLength {
				*ps = append(*ps, problem{at: at, text: fmt.Sprintf("%s has %d characters; at least %d are required", path, length, *n.minLength)})
			}
			if n.maxLength != nil && length > *n.maxLength {
				*ps = append(*ps, problem{at: at, text: fmt.Sprintf("%s has %d characters; at most %d are allowed", path, length, *n.maxLength)})
			}
		}
		if n.pattern != nil && !n.pattern.MatchString(v) {
			*ps = append(*ps, problem{at: at, text: fmt.Sprintf("%s does not match the pattern %s: %s", path, n.pattern, quote(v))})
		}
	case json.Number:
		if n.minimum == nil && n.maximum == nil {
			break
		}
		// Exact, as JSON Schema compares; slow for a number like 1e999999999, which is why the report's
		// policy leaves bounds to the upstream.
		r, ok := new(big.Rat).SetString(string(v))
		if !ok {
			break
		}
		if n.minimum != nil && r.Cmp(n.minimum) < 0 {
			*ps = append(*ps, problem{at: at, text: fmt.Sprintf("%s must be at least %s, not %s", path, n.minimum.RatString(), quote(string(v)))})
		}
		if n.maximum != nil && r.Cmp(n.maximum) > 0 {
			*ps = append(*ps, problem{at: at, text: fmt.Sprintf("%s must be at most %s, not %s", path, n.maximum.RatString(), quote(string(v)))})
		}
	}
}

// inEnum reports whether v is one of the enumeration's values.
func (n *node) inEnum(v any) bool {
	switch v := v.(type) {
	case nil:
		return n.enumNull
	case string:
		return slices.Contains(n.enum, v)
	}
	return false
}

// checkFormat returns the problem of a value that is not of the node's format. A format applies to the
// values of its type only: a date-time or a date to strings, int32 and integer to numbers.
func (n *node) checkFormat(v any, path string) (string, bool) {
	switch v := v.(type) {
	case string:
		switch {
		case n.format == "date-time" && !rfc3339.Valid(v):
			return fmt.Sprintf("%s is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): %s", path, quote(v)), true
		case n.format == "date" && !validDate(v):
			return fmt.Sprintf("%s is not a date (like 2024-05-01): %s", path, quote(v)), true
		}
	case json.Number:
		if n.format != "int32" && n.format != "integer" {
			break
		}
		switch err := int32Error(string(v)); {
		case errors.Is(err, errNotInteger):
			return fmt.Sprintf("%s must be an integer, not %s", path, quote(string(v))), true
		case errors.Is(err, errInt32Range) && n.format == "int32":
			return fmt.Sprintf("%s is out of the int32 range: %s", path, quote(string(v))), true
		}
	}
	return "", false
}

// validDate reports whether s is an RFC 3339 full-date, a real calendar date.
func validDate(s string) bool {
	_, err := time.Parse(time.DateOnly, s)
	return err == nil
}

// Errors of the int32 format, told apart in the problems they give.
var (
	errNotInteger = errors.New("not an integer")
	errInt32Range = errors.New("out of the int32 range")
)

// int32Error checks a JSON number for the int32 format: an integer (1e3 and 12.0 are) in the int32
// range. It uses strconv rather than big.Rat, so a number like 1e999999999 costs no more than another.
func int32Error(s string) error {
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
