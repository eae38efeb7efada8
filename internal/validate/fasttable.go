package validate

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// reportFields is the walker's field table of the report schema, derived at the first check; nil when
// the schema has something the walker does not know, and Report then always checks against the schema.
var reportFields = sync.OnceValue(func() []field {
	fs, err := fastFields(schemas()[reportBody.name])
	if err != nil {
		return nil // correct without it, only slower; TestFastPathDerived keeps it there
	}
	return fs
})

// fastFields derives the walker's field table from a schema of schemas.json. It knows the keywords of
// the report's policy (types, $ref, properties, required, items, maxItems and the date-time and int32
// formats) and refuses anything else, so that the walker never accepts what the schema refuses.
func fastFields(root *node) ([]field, error) {
	f, err := deriveField("", root, true, 0)
	if err != nil {
		return nil, err
	}
	if f.kind != kObject {
		return nil, errors.New("fast path: the report schema is not an object")
	}
	return f.fields, nil
}

// deriveField derives the field of one use of a schema.
func deriveField(name string, use *node, required bool, depth int) (field, error) {
	f := field{name: name, required: required}
	if depth > 32 {
		return f, errors.New("fast path: schema nested too deeply")
	}
	t := use.types &^ tNull
	f.notNull = use.types&tNull == 0
	if t != tString && t != tNumber && t != tObject && t != tArray {
		return f, fmt.Errorf("fast path: types %b", use.types)
	}
	body := use
	if use.ref != nil {
		if use.hasKeywords() {
			return f, errors.New("fast path: keywords beside $ref")
		}
		body = use.ref
		if body.types != 0 || body.ref != nil {
			return f, errors.New("fast path: a definition with a type or a $ref")
		}
	}
	if body.hasEnum || body.minItems != nil || body.minLength != nil || body.maxLength != nil ||
		body.pattern != nil || body.minimum != nil || body.maximum != nil {
		return f, errors.New("fast path: a keyword of values")
	}
	switch {
	case t == tString && body.format == "date-time":
		f.kind = kDateTime
	case t == tString && body.format == "":
		f.kind = kString
	case t == tNumber && body.format == "int32":
		f.kind = kInt32
	case t == tNumber && body.format == "":
		f.kind = kNumber
	case t == tObject && body.format == "" && body.items == nil && body.maxItems == nil:
		f.kind = kObject
		for _, n := range slices.Sorted(maps.Keys(body.props)) {
			pf, err := deriveField(n, body.props[n], slices.Contains(body.required, n), depth+1)
			if err != nil {
				return f, err
			}
			f.fields = append(f.fields, pf)
		}
		for _, r := range body.required {
			if body.props[r] == nil {
				return f, fmt.Errorf("fast path: required %q is not a property", r)
			}
		}
		if len(f.fields) > 64 {
			return f, errors.New("fast path: more than 64 properties")
		}
	case t == tArray && body.format == "" && body.props == nil && body.required == nil:
		f.kind = kArray
		if body.items == nil {
			return f, errors.New("fast path: an array without items")
		}
		e, err := deriveField("", body.items, true, depth+1)
		if err != nil {
			return f, err
		}
		if !e.notNull {
			return f, errors.New("fast path: nullable array items")
		}
		f.elem = &e
		if body.maxItems != nil {
			if *body.maxItems == 0 {
				return f, errors.New("fast path: maxItems 0")
			}
			f.maxItems = *body.maxItems
		}
	default:
		return f, fmt.Errorf("fast path: types %b with format %q", use.types, body.format)
	}
	return f, nil
}

// hasKeywords reports whether n has keywords other than its types and $ref.
func (n *node) hasKeywords() bool {
	return n.hasEnum || n.format != "" || n.props != nil || n.required != nil || n.items != nil ||
		n.minItems != nil || n.maxItems != nil || n.minLength != nil || n.maxLength != nil ||
		n.pattern != nil || n.minimum != nil || n.maximum != nil
}
