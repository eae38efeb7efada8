package jsonscan

import "strconv"

// Kind is the JSON type of the value the scanner is at.
type Kind uint8

// The kinds of JSON values. Invalid means that no value begins there: the input ended, it is not JSON,
// or the scanner stopped at an earlier error.
const (
	Invalid Kind = iota
	Object
	Array
	String
	Number
	True
	False
	Null
)

// kinds maps the first byte of a value to its kind.
var kinds = func() (t [256]Kind) {
	t['{'], t['['], t['"'], t['t'], t['f'], t['n'] = Object, Array, String, True, False, Null
	t['-'] = Number
	for c := '0'; c <= '9'; c++ {
		t[c] = Number
	}
	return t
}()

// Scanner reads one JSON value in one pass, without decoding it, and stops at the first syntax error
// (RFC 8259, with encoding/json's acceptance: invalid UTF-8 in strings is accepted, and objects and
// arrays nest at most MaxDepth deep). The caller walks the value: Kind says what comes next; Object and
// Member, or Array and Elem, step through a container; String and Number read scalars; Skip passes over
// any value, containers included, at full speed. After the value, End says whether the input held
// exactly that value.
//
// Errors are sticky: after the first, every method returns its zero result (loops over Member and Elem
// end) and Err and End report it. The zero Scanner reads empty input; Reset starts over on new input.
// A Scanner does not copy its input: the byte slices it returns alias it. It allocates only for an
// error, and for nesting deeper than 255 within one Skip.
type Scanner struct {
	data  []byte
	i     int   // the next byte to read
	depth int   // containers opened by Object and Array and not yet closed
	first bool  // the container just opened has had no member or element yet
	err   error // the first error
}

// Reset makes the scanner read data from its beginning.
func (s *Scanner) Reset(data []byte) {
	*s = Scanner{data: data}
}

// Err returns the first syntax error found, or nil.
func (s *Scanner) Err() error { return s.err }

// Offset returns the index of the next byte to read.
func (s *Scanner) Offset() int { return s.i }

// Kind returns the kind of the value that comes next, skipping the white space before it. When no value
// can begin there it records the syntax error and returns Invalid.
func (s *Scanner) Kind() Kind {
	if s.err != nil {
		return Invalid
	}
	i := skipSpace(s.data, s.i)
	s.i = i
	if i >= len(s.data) {
		s.err = errEOF(len(s.data))
		return Invalid
	}
	k := kinds[s.data[i]]
	if k == Invalid {
		s.err = errChar(s.data, i, "looking for beginning of value")
	}
	return k
}

// Object enters the object that comes next; then Member steps through its members. It reports false
// (and records an error, a *KindError for another value) when no object comes next.
func (s *Scanner) Object() bool { return s.open(Object) }

// Array enters the array that comes next; then Elem steps through its elements. It reports false (and
// records an error, a *KindError for another value) when no array comes next.
func (s *Scanner) Array() bool { return s.open(Array) }

func (s *Scanner) open(k Kind) bool {
	if got := s.Kind(); got != k {
		s.notA(got, k)
		return false
	}
	if s.depth++; s.depth > MaxDepth {
		s.err = errDepth(s.i)
		return false
	}
	s.i++
	s.first = true
	return true
}

// Member reads the next member's key of the object entered by Object, up to its value, which the caller
// then reads (with Kind, String, Skip, ...) before calling Member again. key is the key's body between
// the quotes, undecoded, and esc whether it holds a backslash escape (see Equal, EqualFold, Unquote). At
// the object's end, or at an error, ok is false.
func (s *Scanner) Member() (key []byte, esc bool, ok bool) {
	if s.err != nil {
		return nil, false, false
	}
	data, n := s.data, len(s.data)
	i := skipSpace(data, s.i)
	if i >= n {
		s.err = errEOF(n)
		return nil, false, false
	}
	if s.first {
		s.first = false
		if data[i] == '}' {
			s.i, s.depth = i+1, s.depth-1
			return nil, false, false
		}
	} else {
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			s.i, s.depth = i+1, s.depth-1
			return nil, false, false
		default:
			s.err = errChar(data, i, "after object key:value pair")
			return nil, false, false
		}
		if i >= n {
			s.err = errEOF(n)
			return nil, false, false
		}
	}
	if data[i] != '"' {
		s.err = errChar(data, i, "looking for beginning of object key string")
		return nil, false, false
	}
	start := i + 1
	i = skipPlain(data, start) // fast path for a key without escapes; the rest goes to scanString
	if i < n && data[i] == '"' {
		i++
	} else {
		var err error
		if i, esc, err = scanString(data, i); err != nil {
			s.err = err
			return nil, false, false
		}
	}
	key = data[start : i-1]
	i = skipSpace(data, i)
	if i >= n {
		s.err = errEOF(n)
		return nil, false, false
	}
	if data[i] != ':' {
		s.err = errChar(data, i, "after object key")
		return nil, false, false
	}
	s.i = i + 1
	return key, esc, true
}

// Elem reports whether the array entered by Array has another element, which the caller then reads
// before calling Elem again. At the array's end, or at an error, it reports false.
func (s *Scanner) Elem() bool {
	if s.err != nil {
		return false
	}
	i := skipSpace(s.data, s.i)
	if i >= len(s.data) {
		s.err = errEOF(len(s.data))
		return false
	}
	switch c := s.data[i]; {
	case s.first:
		s.first = false
		if c != ']' {
			s.i = i
			return true
		}
	case c == ',':
		s.i = i + 1
		return true
	case c != ']':
		s.err = errChar(s.data, i, "after array element")
		return false
	}
	s.i, s.depth = i+1, s.depth-1 // the array's ']'
	return false
}

// String reads the string that comes next and returns its body between the quotes, undecoded, and
// whether it holds a backslash escape; Unquote decodes it. When no string comes next it records an
// error (a *KindError for another value) and returns nil.
func (s *Scanner) String() (raw []byte, esc bool) {
	if k := s.Kind(); k != String {
		s.notA(k, String)
		return nil, false
	}
	data, n := s.data, len(s.data)
	start := s.i + 1
	i := skipPlain(data, start)
	if i < n && data[i] == '"' {
		i++
	} else {
		var err error
		if i, esc, err = scanString(data, i); err != nil {
			s.err = err
			return nil, false
		}
	}
	s.i = i
	return data[start : i-1], esc
}

// Number reads the number that comes next and returns it as written. When no number comes next it
// records an error (a *KindError for another value) and returns nil.
func (s *Scanner) Number() []byte {
	if k := s.Kind(); k != Number {
		s.notA(k, Number)
		return nil
	}
	start := s.i
	i, err := scanNumber(s.data, start)
	if err != nil {
		s.err = err
		return nil
	}
	s.i = i
	return s.data[start:i]
}

// notA records that the value at s.i is of kind got, not want (unless Kind recorded a syntax error).
func (s *Scanner) notA(got, want Kind) {
	if s.err == nil {
		s.err = &KindError{Offset: s.i, Got: got, Want: want}
	}
}

// KindError reports a value of another kind than the caller asked for (with String, Number, Object or
// Array): the input may well be valid JSON.
type KindError struct {
	Offset    int
	Got, Want Kind
}

func (e *KindError) Error() string {
	return e.Got.String() + " at byte " + strconv.Itoa(e.Offset) + " where " + e.Want.String() + " was expected"
}

// String names the kind as a message does: "an object", "a string", "true", ...
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

var kindNames = [...]string{Invalid: "no value", Object: "an object", Array: "an array", String: "a string",
	Number: "a number", True: "true", False: "false", Null: "null"}

// Skip reads the value that comes next, whatever it is, and returns it as written (without the white
// space around it). Literals (true, false, null) are read with Skip too.
func (s *Scanner) Skip() []byte {
	if s.err != nil {
		return nil
	}
	data := s.data
	start := skipSpace(data, s.i)
	if start < len(data) && data[start] == '"' { // the common case, inline: a string without escapes
		if i := skipPlain(data, start+1); i < len(data) && data[i] == '"' {
			s.i = i + 1
			return data[start : i+1]
		}
	}
	i, err := skipValue(data, start, s.depth)
	if err != nil {
		s.err = err
		return nil
	}
	s.i = i
	return data[start:i]
}

// End reports the first error, or an error when anything but white space follows the value read.
func (s *Scanner) End() error {
	if s.err == nil {
		if i := skipSpace(s.data, s.i); i < len(s.data) {
			s.err = errChar(s.data, i, "after top-level value")
		}
	}
	return s.err
}

// Valid reports whether data is one JSON value, with white space around it allowed; it accepts exactly
// what encoding/json's Valid accepts.
func Valid(data []byte) bool {
	var s Scanner
	s.Reset(data)
	s.Skip()
	return s.End() == nil
}
