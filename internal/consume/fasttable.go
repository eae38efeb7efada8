package consume

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// fastFields derives the walker's field table from the converted JSON Schema of compileReport. It
// knows the keywords the converter writes (type, $ref, properties, required, items, maxItems and the
// date-time and int32 formats) and refuses anything else, so that the walker never accepts what the
// schema refuses; without a table, Validate always asks the JSON Schema validator.
func fastFields(root map[string]any) ([]field, error) {
	defs, _ := root["$defs"].(map[string]any)
	d := deriver{defs: defs}
	f, err := d.use("", root, true, 0)
	if err != nil {
		return nil, err
	}
	if f.kind != kObject {
		return nil, errors.New("fast path: the report schema is not an object")
	}
	return f.fields, nil
}

type deriver struct{ defs map[string]any }

func (d *deriver) use(name string, m map[string]any, required bool, depth int) (field, error) {
	f := field{name: name, required: required}
	if depth > 32 {
		return f, errors.New("fast path: schema nested too deeply")
	}
	var t string
	types, _ := m["type"].([]any)
	for _, x := range types {
		switch s, _ := x.(string); {
		case s == "null":
		case t == "":
			t = s
		default:
			return f, errors.New("fast path: a field of more than one type")
		}
	}
	f.notNull = len(types) == 1
	body := m
	if ref, ok := m["$ref"].(string); ok {
		def, ok := d.defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		if !ok {
			return f, fmt.Errorf("fast path: unknown $ref %q", ref)
		}
		for k := range m {
			if k != "type" && k != "$ref" && k != "$defs" {
				return f, fmt.Errorf("fast path: keyword %q beside $ref", k)
			}
		}
		body = def
	}
	for k := range body {
		switch k {
		case "type", "$ref", "$defs", "properties", "required", "items", "maxItems", "format":
		default:
			return f, fmt.Errorf("fast path: keyword %q", k)
		}
	}
	format, _ := body["format"].(string)
	switch {
	case t == "string" && format == "date-time":
		f.kind = kDateTime
	case t == "string" && format == "":
		f.kind = kString
	case t == "number" && format == "int32":
		f.kind = kInt32
	case t == "number" && format == "":
		f.kind = kNumber
	case t == "object" && format == "":
		f.kind = kObject
		props, _ := body["properties"].(map[string]any)
		req := map[string]bool{}
		reqs, _ := body["required"].([]string)
		for _, r := range reqs {
			req[r] = true
		}
		for _, n := range slices.Sorted(maps.Keys(props)) {
			pm, _ := props[n].(map[string]any)
			pf, err := d.use(n, pm, req[n], depth+1)
			if err != nil {
				return f, err
			}
			f.fields = append(f.fields, pf)
		}
		for _, r := range reqs {
			if props[r] == nil {
				return f, fmt.Errorf("fast path: required %q is not a property", r)
			}
		}
		if len(f.fields) > 64 {
			return f, errors.New("fast path: more than 64 properties")
		}
	case t == "array" && format == "":
		f.kind = kArray
		im, _ := body["items"].(map[string]any)
		if im == nil {
			return f, errors.New("fast path: an array without items")
		}
		e, err := d.use("", im, true, depth+1)
		if err != nil {
			return f, err
		}
		if !e.notNull {
			return f, errors.New("fast path: nullable array items")
		}
		f.elem = &e
		if mi, ok := body["maxItems"].(uint64); ok {
			f.maxItems = int(mi)
		}
	default:
		return f, fmt.Errorf("fast path: type %q with format %q", t, format)
	}
	return f, nil
}
