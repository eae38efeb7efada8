package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// problem is one message and where in the body it belongs, for sorting.
type problem struct {
	at   string // the value's instance location, its tokens joined by "\x00"
	end  bool   // at the end of that value (a missing field of an object) rather than its start
	text string
}

// quoteValue shows a value a problem names: a string quoted and cut, anything else as its JSON type.
func quoteValue(v any) string {
	if s, ok := v.(string); ok {
		return quote(s)
	}
	return describe(v)
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
// unknown field costs linear time. (A body with a key given twice is refused before it is checked.)
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
