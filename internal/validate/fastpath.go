package validate

import (
	"errors"
	"math"
	"strconv"

	"github.com/tracking-bridge/tracking-bridge/internal/jsonscan"
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

// field describes one field of an object of the document.
type field struct {
	name     string
	kind     wkind
	required bool    // must be present (and then not null)
	notNull  bool    // must not be null when present
	fields   []field // kObject
	elem     *field  // kArray: its items (name unused)
	maxItems int     // kArray; 0 = no limit
}

// walker checks a body against the schema in one pass, without decoding it, on the bridge's JSON scanner
// (internal/jsonscan: encoding/json's acceptance, MaxDepth). It allocates only for the problems it finds
// (and for keys or date-times with escapes). Problems come in the order of the body, a missing field at
// the end of its object. On a syntax error the scanner stops; Validate then asks encoding/json for the
// message.
type walker struct {
	s       jsonscan.Scanner
	path    []byte // of the value being checked: "event.observation.seals[3]"
	pathBuf [128]byte
	p       problems
}

// run checks the whole body. It returns ok = false on a syntax error, and the JSON type of the body when
// it is valid JSON but not an object.
func (w *walker) run(body []byte, root []field) (notObject string, ok bool) {
	w.s.Reset(body)
	if k := w.s.Kind(); k == jsonscan.Object {
		w.object(root)
	} else {
		w.s.Skip()
		notObject = typeOf(k)
	}
	return notObject, w.s.End() == nil
}

// text returns the value of a string read by the scanner.
func text(raw []byte, escaped bool) string { return jsonscan.Unquote(raw, escaped) }

// object checks the object that comes next against fs.
func (w *walker) object(fs []field) {
	var seen uint64 // bit n: fs[n] present
	w.s.Object()
	for raw, escaped, ok := w.s.Member(); ok; raw, escaped, ok = w.s.Member() {
		idx := -1
		for n := range fs {
			if jsonscan.Equal(raw, escaped, fs[n].name) {
				idx = n
				break
			}
		}
		if idx < 0 {
			w.s.Skip()
			continue
		}
		seen |= 1 << idx
		mark := w.push(fs[idx].name)
		w.value(fs[idx], fs[idx].required || fs[idx].notNull)
		w.path = w.path[:mark]
	}
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

// value checks the value that comes next against f; null is a problem only when required.
func (w *walker) value(f field, required bool) {
	k := w.s.Kind()
	if k == jsonscan.Null {
		w.s.Skip()
		if required {
			w.p.addf("%s must be %s, not null", string(w.path), kindNames[f.kind])
		}
		return
	}
	ok := false
	switch f.kind {
	case kString, kDateTime:
		ok = k == jsonscan.String
	case kNumber, kInt32:
		ok = k == jsonscan.Number
	case kObject:
		ok = k == jsonscan.Object
	case kArray:
		ok = k == jsonscan.Array
	}
	if !ok {
		w.s.Skip()
		w.p.addf("%s must be %s, not %s", string(w.path), kindNames[f.kind], typeOf(k))
		return
	}
	switch f.kind {
	case kString:
		w.s.String()
	case kNumber:
		w.s.Number()
	case kDateTime:
		if s := text(w.s.String()); !rfc3339.Valid(s) {
			w.p.addf("%s is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): %s", string(w.path), quote(s))
		}
	case kInt32:
		w.int32(w.s.Number())
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

// array checks the array that comes next: its items against f.elem, and its length.
func (w *walker) array(f field) {
	mark := len(w.path)
	n := 0
	w.s.Array()
	for w.s.Elem() {
		w.path = append(strconv.AppendInt(append(w.path, '['), int64(n), 10), ']')
		w.value(*f.elem, true)
		w.path = w.path[:mark]
		n++
	}
	if f.maxItems > 0 && n > f.maxItems {
		w.p.addf("%s has %d items; at most %d are allowed", string(w.path), n, f.maxItems)
	}
}

// typeOf names a JSON type.
func typeOf(k jsonscan.Kind) string {
	switch k {
	case jsonscan.Object:
		return "an object"
	case jsonscan.Array:
		return "an array"
	case jsonscan.String:
		return "a string"
	case jsonscan.True, jsonscan.False:
		return "a boolean"
	case jsonscan.Null:
		return "null"
	default:
		return "a number"
	}
}

// fastValid reports whether the walker finds body, which has passed Validate's checks of size, emptiness
// and UTF-8, to be an object matching root without any problem.
func fastValid(body []byte, root []field) bool {
	var w walker
	w.path = w.pathBuf[:0]
	notObject, ok := w.run(body, root)
	return ok && notObject == "" && len(w.p.msgs) == 0
}
