package consume

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// problem is one message and where in the body it belongs, for sorting.
type problem struct {
	at   string // the value's instance location, its tokens joined by "\x00"
	end  bool   // at the end of that value (a missing field of an object) rather than its start
	text string
}

// problems walks the validator's error tree, turns each leaf into a message in the words the bridge has
// always used ("event.timestamp is missing", "order must be an object, not an array"), and lists them in
// the order of the body. It runs for invalid reports only.
func (rs *compiledReport) problems(ve *jsonschema.ValidationError, doc map[string]any, body []byte) []string {
	var ps []problem
	var leaves func(e *jsonschema.ValidationError)
	leaves = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				leaves(c)
			}
			return
		}
		ps = append(ps, rs.describe(e, doc)...)
	}
	leaves(ve)
	if len(ps) > 1 {
		pos := positions(body, ps)
		slices.SortStableFunc(ps, func(a, b problem) int {
			return pos.of(a) - pos.of(b)
		})
	}
	var p problems
	for _, x := range ps {
		p.addf("%s", x.text)
	}
	return p.list()
}

// describe turns one leaf error into its problems (a missing-fields error gives one per field).
func (rs *compiledReport) describe(e *jsonschema.ValidationError, doc map[string]any) []problem {
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
	// The value keywords of CompileSchema's strict policy.
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
	// A keyword the document does not use in a report today: the validator's own words, on one line.
	msg := strings.Join(strings.Fields(e.Error()), " ")
	return []problem{{at: at, text: path + ": " + msg}}
}

// quoteValue shows a value a problem names: a string quoted and cut, anything else as its JSON type.
func quoteValue(v any) string {
	if s, ok := v.(string); ok {
		return quote(s)
	}
	return describe(v)
}

// instance returns the display path of a location ("event.observation.seals[3]") and the value there.
func instance(doc map[string]any, loc []string) (string, any) {
	var b strings.Builder
	var v any = doc
	for _, tok := range loc {
		switch c := v.(type) {
		case []any:
			b.WriteString("[" + tok + "]")
			i, _ := strconv.Atoi(tok)
			if i >= 0 && i < len(c) {
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

// join returns the path of a field of the object at path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// article names a JSON Schema type as the problems do.
func article(t string) string {
	switch t {
	case "object", "array", "integer":
		return "an " + t
	default:
		return "a " + t
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

func numberText(v any) string {
	if n, ok := v.(json.Number); ok {
		return string(n)
	}
	return fmt.Sprint(v)
}

// quote quotes an input value for a problem: cut to 40 characters, escaped.
func quote(s string) string {
	const maxRunes = 40
	if utf8.RuneCountInString(s) > maxRunes {
		r := []rune(s)
		return fmt.Sprintf("%q…", string(r[:maxRunes]))
	}
	return fmt.Sprintf("%q", s)
}

// spans maps an instance location to the byte offsets where its value starts and ends in the body.
type spans map[string][2]int

func (s spans) of(p problem) int {
	if p.end {
		return s[p.at][1]
	}
	return s[p.at][0]
}

// positions reads body (valid JSON) once more with a token decoder and records where the values of the
// problems' locations start and end, so that problems can be listed in the order of the body. It follows
// only the paths that lead to a problem and skips other values without tracking them, so that a deep
// unknown field costs linear time. Of a key given twice, the last value's place counts, as its value is
// the one validated.
func positions(body []byte, ps []problem) spans {
	need := map[string]bool{"": true} // the problems' locations and every prefix of them
	for _, p := range ps {
		for at := p.at; ; {
			need[at] = true
			i := strings.LastIndexByte(at, 0)
			if i < 0 {
				break
			}
			at = at[:i]
		}
	}
	pw := posWalker{dec: json.NewDecoder(bytes.NewReader(body)), need: need, out: spans{}}
	pw.dec.UseNumber()
	pw.value("", true)
	return pw.out
}

type posWalker struct {
	dec  *json.Decoder
	need map[string]bool
	out  spans
	err  error
}

// token returns the next token; after an error (not expected: the body was decoded before) it returns
// nil, which ends every loop.
func (pw *posWalker) token() json.Token {
	if pw.err != nil {
		return nil
	}
	tok, err := pw.dec.Token()
	if err != nil {
		pw.err = err
		return nil
	}
	return tok
}

// value reads the value at path; with track it records where it is and follows its members that lead
// to a problem.
func (pw *posWalker) value(path string, track bool) {
	start := int(pw.dec.InputOffset())
	tok := pw.token()
	d, isDelim := tok.(json.Delim)
	if isDelim && (d == '{' || d == '[') {
		for n := 0; pw.err == nil && pw.dec.More(); n++ {
			var key string
			if d == '{' {
				key, _ = pw.token().(string)
			} else if track {
				key = strconv.Itoa(n)
			}
			if !track {
				pw.value("", false)
				continue
			}
			child := joinAt(path, key)
			pw.value(child, pw.need[child])
		}
		pw.token() // the closing delimiter
	}
	if track {
		pw.out[path] = [2]int{start, int(pw.dec.InputOffset())}
	}
}

func joinAt(path, tok string) string {
	if path == "" {
		return tok
	}
	return path + "\x00" + tok
}
