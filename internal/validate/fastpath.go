package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// The fast path of Validate. Decoding a report into maps and running the JSON Schema validator costs
// far more than the rest of the bridge's work on a report allows, and almost every report is valid. So
// a one-pass walker, which parses the body without decoding it and allocates only for what it finds,
// checks the report against a field table derived at start-up from the same compiled JSON Schema
// (fastFields). It can only accept: when it finds anything, or cannot tell, the JSON Schema validator
// decides and words the problems. FuzzFastPath checks that the two agree.

// wkind is the JSON type a field must have.
type wkind uint8

const (
	kString   wkind = iota + 1
	kDateTime       // a string holding an RFC 3339 date-time
	kNumber
	kInt32
	kObject
	kArray
)

var kindNames = map[wkind]string{
	kString:   "a string",
	kDateTime: "a date-time string (RFC 3339)",
	kNumber:   "a number",
	kInt32:    "an integer",
	kObject:   "an object",
	kArray:    "an array",
}

// field describes one field of an object of the spec.
type field struct {
	name     string
	kind     wkind
	required bool    // must be present (and then not null)
	notNull  bool    // must not be null when present
	fields   []field // kObject
	elem     *field  // kArray: its items (name unused)
	maxItems int     // kArray; 0 = no limit
}

// maxDepth is the deepest nesting of objects and arrays accepted, as in encoding/json.
const maxDepth = 10000

// walker checks a body against the schema in one pass, without decoding it: it parses the JSON strictly
// (RFC 8259, as encoding/json does) and allocates only for the problems it finds (and for keys or
// date-times with escapes). Problems come in the order of the body, a missing field at the end of its
// object. On a syntax error it stops; Validate then asks encoding/json for the message.
type walker struct {
	b       []byte
	i       int
	depth   int    // objects and arrays open
	path    []byte // of the value being checked: "event.observation.seals[3]"
	pathBuf [128]byte
	p       problems
}

// badSyntax is the panic value that unwinds the walker on a syntax error.
type badSyntax struct{}

func (w *walker) fail() { panic(badSyntax{}) }

// run checks the whole body. It returns ok = false on a syntax error, and the JSON type of the body when
// it is valid JSON but not an object.
func (w *walker) run(root []field) (notObject string, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, is := r.(badSyntax); !is {
				panic(r)
			}
			ok = false
		}
	}()
	w.ws()
	if c := w.peek(); c == '{' {
		w.object(root)
	} else {
		w.skip()
		notObject = typeOf(c)
	}
	w.ws()
	if w.i != len(w.b) {
		w.fail() // data after the value
	}
	return notObject, true
}

// peek returns the byte at w.i; the body must not end there.
func (w *walker) peek() byte {
	if w.i >= len(w.b) {
		w.fail()
	}
	return w.b[w.i]
}

func (w *walker) expect(c byte) {
	if w.peek() != c {
		w.fail()
	}
	w.i++
}

func (w *walker) ws() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// str reads the string at w.i and returns its content as in the body, and whether it has escapes.
func (w *walker) str() (raw []byte, escaped bool) {
	w.expect('"')
	start := w.i
	for {
		switch c := w.peek(); {
		case c == '"':
			raw = w.b[start:w.i]
			w.i++
			return raw, escaped
		case c == '\\':
			escaped = true
			w.i++
			switch w.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				w.i++
			case 'u':
				w.i++
				for range 4 {
					if h := w.peek(); !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						w.fail()
					}
					w.i++
				}
			default:
				w.fail()
			}
		case c < 0x20:
			w.fail()
		default:
			w.i++
		}
	}
}

// text returns the value of a string read by str.
func text(raw []byte, escaped bool) string {
	if !escaped {
		return string(raw)
	}
	var s string
	// str checked the escapes, so this cannot fail.
	_ = json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s)
	return s
}

// number reads the number at w.i.
func (w *walker) number() []byte {
	start := w.i
	if w.peek() == '-' {
		w.i++
	}
	switch c := w.peek(); {
	case c == '0':
		w.i++
	case '1' <= c && c <= '9':
		w.digits()
	default:
		w.fail()
	}
	if w.i < len(w.b) && w.b[w.i] == '.' {
		w.i++
		w.digits()
	}
	if w.i < len(w.b) && (w.b[w.i] == 'e' || w.b[w.i] == 'E') {
		w.i++
		if c := w.peek(); c == '+' || c == '-' {
			w.i++
		}
		w.digits()
	}
	return w.b[start:w.i]
}

// digits reads one or more decimal digits.
func (w *walker) digits() {
	start := w.i
	for w.i < len(w.b) && '0' <= w.b[w.i] && w.b[w.i] <= '9' {
		w.i++
	}
	if w.i == start {
		w.fail()
	}
}

func (w *walker) literal(lit string) {
	if !bytes.HasPrefix(w.b[w.i:], []byte(lit)) {
		w.fail()
	}
	w.i += len(lit)
}

// enter and leave count the nesting of objects and arrays.
func (w *walker) enter() {
	if w.depth++; w.depth > maxDepth {
		w.fail()
	}
}

func (w *walker) leave() { w.depth-- }

// skip parses the value at w.i, whatever it is.
func (w *walker) skip() {
	switch c := w.peek(); {
	case c == '"':
		w.str()
	case c == '{':
		w.enter()
		w.i++
		w.ws()
		if w.peek() == '}' {
			w.i++
			w.leave()
			return
		}
		for {
			w.ws()
			w.str()
			w.ws()
			w.expect(':')
			w.ws()
			w.skip()
			w.ws()
			if w.peek() == ',' {
				w.i++
				continue
			}
			w.expect('}')
			w.leave()
			return
		}
	case c == '[':
		w.enter()
		w.i++
		w.ws()
		if w.peek() == ']' {
			w.i++
			w.leave()
			return
		}
		for {
			w.ws()
			w.skip()
			w.ws()
			if w.peek() == ',' {
				w.i++
				continue
			}
			w.expect(']')
			w.leave()
			return
		}
	case c == 't':
		w.literal("true")
	case c == 'f':
		w.literal("false")
	case c == 'n':
		w.literal("null")
	default:
		w.number()
	}
}

// object checks the object at w.i against fs.
func (w *walker) object(fs []field) {
	w.enter()
	var seen uint64 // bit n: fs[n] present
	w.i++
	w.ws()
	if w.peek() == '}' {
		w.i++
	} else {
		for {
			w.ws()
			raw, escaped := w.str()
			w.ws()
			w.expect(':')
			w.ws()
			idx := -1
			for n := range fs {
				if !escaped && fs[n].name == string(raw) || escaped && fs[n].name == text(raw, true) {
					idx = n
					break
				}
			}
			if idx < 0 {
				w.skip()
			} else {
				seen |= 1 << idx
				mark := w.push(fs[idx].name)
				w.value(fs[idx], fs[idx].required || fs[idx].notNull)
				w.path = w.path[:mark]
			}
			w.ws()
			if w.peek() == ',' {
				w.i++
				continue
			}
			w.expect('}')
			break
		}
	}
	w.leave()
	for n, f := range fs {
		if f.required && seen&(1<<n) == 0 {
			mark := w.push(f.name)
			w.p.addf("%s is missing", string(w.path))
			w.path = w.path[:mark]
		}
	}
}

// push appends a field name to the path and returns the length to cut it back to.
func (w *walker) push(name string) int {
	mark := len(w.path)
	if mark > 0 {
		w.path = append(w.path, '.')
	}
	w.path = append(w.path, name...)
	return mark
}

// value checks the value at w.i against f; null is a problem only when required.
func (w *walker) value(f field, required bool) {
	c := w.peek()
	if c == 'n' {
		w.literal("null")
		if required {
			w.p.addf("%s must be %s, not null", string(w.path), kindNames[f.kind])
		}
		return
	}
	ok := false
	switch f.kind {
	case kString, kDateTime:
		ok = c == '"'
	case kNumber, kInt32:
		ok = c == '-' || '0' <= c && c <= '9'
	case kObject:
		ok = c == '{'
	case kArray:
		ok = c == '['
	}
	if !ok {
		w.skip()
		w.p.addf("%s must be %s, not %s", string(w.path), kindNames[f.kind], typeOf(c))
		return
	}
	switch f.kind {
	case kString:
		w.str()
	case kNumber:
		w.number()
	case kDateTime:
		if s := text(w.str()); !rfc3339.Valid(s) {
			w.p.addf("%s is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): %s", string(w.path), quote(s))
		}
	case kInt32:
		w.int32(w.number())
	case kObject:
		w.object(f.fields)
	case kArray:
		w.array(f)
	}
}

// int32 checks that a JSON number is an integer in the int32 range. 1e3 and 12.0 are integers too.
func (w *walker) int32(num []byte) {
	s := string(num)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i < math.MinInt32 || i > math.MaxInt32 {
			w.p.addf("%s is out of the int32 range: %s", string(w.path), quote(s))
		}
		return
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange) || f != math.Trunc(f):
		w.p.addf("%s must be an integer, not %s", string(w.path), quote(s))
	case err != nil || f < math.MinInt32 || f > math.MaxInt32:
		w.p.addf("%s is out of the int32 range: %s", string(w.path), quote(s))
	}
}

// array checks the array at w.i: its items against f.elem, and its length.
func (w *walker) array(f field) {
	w.enter()
	mark := len(w.path)
	n := 0
	w.i++
	w.ws()
	if w.peek() == ']' {
		w.i++
	} else {
		for {
			w.ws()
			w.path = append(strconv.AppendInt(append(w.path, '['), int64(n), 10), ']')
			w.value(*f.elem, true)
			w.path = w.path[:mark]
			n++
			w.ws()
			if w.peek() == ',' {
				w.i++
				continue
			}
			w.expect(']')
			break
		}
	}
	w.leave()
	if f.maxItems > 0 && n > f.maxItems {
		w.p.addf("%s has %d items; at most %d are allowed", string(w.path), n, f.maxItems)
	}
}

// typeOf names the JSON type of the value starting with c.
func typeOf(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// fastValid reports whether the walker finds body, which has passed Validate's checks of size, emptiness
// and UTF-8, to be an object matching root without any problem.
func fastValid(body []byte, root []field) bool {
	w := walker{b: body}
	w.path = w.pathBuf[:0]
	notObject, ok := w.run(root)
	return ok && notObject == "" && len(w.p.msgs) == 0
}
