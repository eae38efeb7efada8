package consume

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// validateRef is the first, straightforward implementation of Validate: decode into maps, then walk the
// schema. It is slower and allocates much more; FuzzValidate checks that Validate finds the same problems.
func validateRef(body []byte, maxBytes int) []string {
	if maxBytes > 0 && len(body) > maxBytes {
		return []string{fmt.Sprintf("the report is %d bytes, more than the limit of %d bytes", len(body), maxBytes)}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return []string{"the report is empty; a TrackingEventReport JSON object is expected"}
	}
	if !utf8.Valid(body) {
		return []string{"the report is not valid UTF-8"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []string{"the report is not valid JSON: " + jsonError(err)}
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return []string{fmt.Sprintf("the report is not valid JSON: unexpected data after the value ending at byte %d", end)}
	}
	if _, ok := v.(map[string]any); !ok {
		return []string{"the report must be a JSON object (TrackingEventReport), not " + describe(v)}
	}
	var p refProblems
	p.object("", v.(map[string]any), reportSchema)
	return p.list()
}

// refProblems collects what validateRef finds.
type refProblems struct {
	msgs  []string
	extra int
}

func (p *refProblems) addf(format string, args ...any) {
	if len(p.msgs) < maxProblems {
		p.msgs = append(p.msgs, fmt.Sprintf(format, args...))
	} else {
		p.extra++
	}
}

func (p *refProblems) list() []string {
	if p.extra > 0 {
		return append(p.msgs, fmt.Sprintf("and %d more problems", p.extra))
	}
	return p.msgs
}

// object checks the fields of the object m found at path.
func (p *refProblems) object(path string, m map[string]any, fs []field) {
	for _, f := range fs {
		fp := f.name
		if path != "" {
			fp = path + "." + f.name
		}
		v, present := m[f.name]
		switch {
		case !present && f.required:
			p.addf("%s is missing", fp)
		case !present:
		case v == nil && f.required:
			p.addf("%s must be %s, not null", fp, kindNames[f.kind])
		case v == nil:
		default:
			p.value(fp, v, f)
		}
	}
}

// value checks one non-null value against its field description.
func (p *refProblems) value(path string, v any, f field) {
	wrong := func() { p.addf("%s must be %s, not %s", path, kindNames[f.kind], describe(v)) }
	switch f.kind {
	case kString:
		if _, ok := v.(string); !ok {
			wrong()
		}
	case kDateTime:
		s, ok := v.(string)
		if !ok {
			wrong()
			return
		}
		if !rfc3339.Valid(s) {
			p.addf("%s is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): %s", path, quote(s))
		}
	case kNumber:
		if _, ok := v.(json.Number); !ok {
			wrong()
		}
	case kInt32:
		n, ok := v.(json.Number)
		if !ok {
			wrong()
			return
		}
		i, err := n.Int64()
		if err != nil {
			// 1e3 or 12.0 are integers too; 1.5 is not.
			fl, ferr := n.Float64()
			if ferr != nil && !errors.Is(ferr, strconv.ErrRange) || ferr == nil && fl != math.Trunc(fl) {
				p.addf("%s must be an integer, not %s", path, quote(n.String()))
				return
			}
			if ferr != nil || fl < math.MinInt32 || fl > math.MaxInt32 {
				p.addf("%s is out of the int32 range: %s", path, quote(n.String()))
			}
			return
		}
		if i < math.MinInt32 || i > math.MaxInt32 {
			p.addf("%s is out of the int32 range: %s", path, quote(n.String()))
		}
	case kObject:
		m, ok := v.(map[string]any)
		if !ok {
			wrong()
			return
		}
		p.object(path, m, f.fields)
	case kArray:
		a, ok := v.([]any)
		if !ok {
			wrong()
			return
		}
		if f.maxItems > 0 && len(a) > f.maxItems {
			p.addf("%s has %d items; at most %d are allowed", path, len(a), f.maxItems)
		}
		for i, e := range a {
			ep := fmt.Sprintf("%s[%d]", path, i)
			if e == nil {
				p.addf("%s must be %s, not null", ep, kindNames[f.elem.kind])
				continue
			}
			p.value(ep, e, *f.elem)
		}
	}
}

// describe names the JSON type of a decoded value.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// jsonError describes a decoding error with the byte offset where it happened.
func jsonError(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "it ends in the middle of a value"
	}
	return err.Error()
}
