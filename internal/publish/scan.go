package publish

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Fields are the top-level members of a tracking event that the bridge routes on.
type Fields struct {
	ID        string // decoded string value of top-level "id"; "" if absent or not a string
	Type      string // decoded string value of top-level "type"
	TypeKind  Kind   // KindMissing, KindString, KindOther (present but not a string, incl. null)
	Timestamp string // decoded string value of top-level "timestamp"; "" if absent / not a string
}

// Kind says whether a top-level member of an event is absent, a string, or some other JSON value.
type Kind uint8

const (
	// KindMissing means the object has no such top-level member.
	KindMissing Kind = iota
	// KindString means the member is present and its value is a JSON string.
	KindString
	// KindOther means the member is present but its value is not a string (null, a number, a boolean,
	// an object or an array).
	KindOther
)

// ErrNotObject is returned (wrapped, with the kind of value found) by ScanEvent for data that is valid
// JSON but whose top-level value is not an object. Test for it with errors.Is.
var ErrNotObject = errors.New("not a JSON object")

var (
	errTopArray  = fmt.Errorf("%w: the top-level value is an array", ErrNotObject)
	errTopString = fmt.Errorf("%w: the top-level value is a string", ErrNotObject)
	errTopNumber = fmt.Errorf("%w: the top-level value is a number", ErrNotObject)
	errTopTrue   = fmt.Errorf("%w: the top-level value is true", ErrNotObject)
	errTopFalse  = fmt.Errorf("%w: the top-level value is false", ErrNotObject)
	errTopNull   = fmt.Errorf("%w: the top-level value is null", ErrNotObject)
)

// maxDepth is the deepest nesting of objects and arrays accepted; it is encoding/json's limit, so that
// ScanEvent accepts exactly what json.Valid accepts.
const maxDepth = 10000

// syntaxError reports invalid JSON and the byte offset at which it was detected.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string {
	return "invalid JSON at byte " + strconv.Itoa(e.off) + ": " + e.msg
}

func errEOF(n int) error {
	return &syntaxError{off: n, msg: "unexpected end of input"}
}

func errChar(data []byte, i int, context string) error {
	return &syntaxError{off: i, msg: "invalid character " + quoteByte(data[i]) + " " + context}
}

// quoteByte renders an offending byte for an error message: 'x' for printable ASCII, else its escape.
func quoteByte(c byte) string {
	switch {
	case c == '\'':
		return `'\''`
	case c >= 0x20 && c < 0x7f:
		return "'" + string(rune(c)) + "'"
	default:
		return fmt.Sprintf(`'\x%02x'`, c)
	}
}

// member is what the scan records about one of the routing members.
type member struct {
	raw  []byte // string body between the quotes, undecoded
	kind Kind
	esc  bool // raw contains a backslash
}

// Indexes into the recorded members (plus one, so that zero means "not a routing member").
const (
	memberID = 1 + iota
	memberType
	memberTimestamp
)

// ScanEvent validates data as one JSON value that is an object (RFC 8259, same acceptance as
// encoding/json.Valid, plus: must be an object, surrounding whitespace allowed) and returns its routing
// fields. The error says precisely what is wrong ("invalid JSON at byte 17: ...", "not a JSON object").
//
// Only top-level members count; of duplicate keys the last one wins, and keys are compared exactly
// (case-sensitively) after decoding their escapes. String values are decoded as encoding/json decodes
// them into a string (escapes resolved, invalid UTF-8 and unpaired surrogates replaced by U+FFFD).
// ScanEvent does not retain data; the returned strings share at most one allocation.
func ScanEvent(data []byte) (Fields, error) {
	var (
		stackBuf [4]uint64 // bit d set: the container at depth d is an object
		stack    = stackBuf[:]
		depth    int
		cur      int // the routing member whose value comes next (memberID...), 0 if none
		mem      [3]member
		n        = len(data)
		i        = skipSpace(data, 0)
		start    int
		esc      bool
		err      error
		top      byte
	)
	if i < n {
		top = data[i]
	}

value: // data[i] (white space skipped) should begin a value
	if i >= n {
		return Fields{}, errEOF(n)
	}
	if cur != 0 && data[i] != '"' {
		mem[cur-1] = member{kind: KindOther}
		cur = 0
	}
	switch c := data[i]; c {
	case '"':
		start = i + 1
		i = skipPlain(data, start) // fast path for a string without escapes; the rest goes to scanString
		if i < n && data[i] == '"' {
			i++
			esc = false
		} else if i, esc, err = scanString(data, i); err != nil {
			return Fields{}, err
		}
		if cur != 0 {
			mem[cur-1] = member{raw: data[start : i-1], kind: KindString, esc: esc}
			cur = 0
		}
	case '{', '[':
		depth++
		if depth > maxDepth {
			return Fields{}, &syntaxError{off: i, msg: "exceeded max depth of " + strconv.Itoa(maxDepth)}
		}
		w := depth >> 6
		if w >= len(stack) { // deeper than 255: rare; grow once to the limit
			stack = append(make([]uint64, 0, maxDepth/64+1), stack...)[:maxDepth/64+1]
		}
		i = skipSpace(data, i+1)
		if c == '{' {
			stack[w] |= 1 << (depth & 63)
			if i < n && data[i] == '}' {
				i++
				depth--
				goto next
			}
			goto key
		}
		stack[w] &^= 1 << (depth & 63)
		if i < n && data[i] == ']' {
			i++
			depth--
			goto next
		}
		goto value
	case 't':
		if i, err = scanLiteral(data, i, "true"); err != nil {
			return Fields{}, err
		}
	case 'f':
		if i, err = scanLiteral(data, i, "false"); err != nil {
			return Fields{}, err
		}
	case 'n':
		if i, err = scanLiteral(data, i, "null"); err != nil {
			return Fields{}, err
		}
	default:
		if c == '-' || c-'0' <= 9 {
			if i, err = scanNumber(data, i); err != nil {
				return Fields{}, err
			}
			break
		}
		return Fields{}, errChar(data, i, "looking for beginning of value")
	}

next: // a value ended just before data[i]
	i = skipSpace(data, i)
	if depth == 0 {
		if i < n {
			return Fields{}, errChar(data, i, "after top-level value")
		}
		goto done
	}
	if i >= n {
		return Fields{}, errEOF(n)
	}
	if stack[depth>>6]&(1<<(depth&63)) != 0 {
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
			goto key
		case '}':
			i++
			depth--
			goto next
		}
		return Fields{}, errChar(data, i, "after object key:value pair")
	}
	switch data[i] {
	case ',':
		i = skipSpace(data, i+1)
		goto value
	case ']':
		i++
		depth--
		goto next
	}
	return Fields{}, errChar(data, i, "after array element")

key: // data[i] (white space skipped) should begin an object key
	if i >= n {
		return Fields{}, errEOF(n)
	}
	if data[i] != '"' {
		return Fields{}, errChar(data, i, "looking for beginning of object key string")
	}
	start = i + 1
	i = skipPlain(data, start) // fast path for a string without escapes; the rest goes to scanString
	if i < n && data[i] == '"' {
		i++
		esc = false
	} else if i, esc, err = scanString(data, i); err != nil {
		return Fields{}, err
	}
	if depth == 1 {
		cur = matchKey(data[start:i-1], esc)
	}
	i = skipSpace(data, i)
	if i >= n {
		return Fields{}, errEOF(n)
	}
	if data[i] != ':' {
		return Fields{}, errChar(data, i, "after object key")
	}
	i = skipSpace(data, i+1)
	goto value

done:
	switch top {
	case '{':
		return buildFields(&mem), nil
	case '[':
		return Fields{}, errTopArray
	case '"':
		return Fields{}, errTopString
	case 't':
		return Fields{}, errTopTrue
	case 'f':
		return Fields{}, errTopFalse
	case 'n':
		return Fields{}, errTopNull
	default:
		return Fields{}, errTopNumber
	}
}

// skipSpace returns the index of the first byte at or after i that is not JSON white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		c := data[i]
		if c > ' ' || (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
			break
		}
		i++
	}
	return i
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plain[c] is true for bytes that need no attention inside a JSON string: everything but '"', '\\'
// and control characters. Bytes >= 0x80 are plain: like encoding/json, invalid UTF-8 is accepted.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

// scanString validates the rest of a string body from data[i], which is anywhere in the body up to its
// first backslash. It returns the index just after the closing quote and whether the body contains a
// backslash escape. ScanEvent inlines the common case (no escape) and calls it for the rest.
func scanString(data []byte, i int) (int, bool, error) {
	esc := false
	for {
		if i+8 <= len(data) {
			// Eight bytes at a time: find the first '"', '\\' or control character. Each term flags a
			// byte's high bit exactly for the lowest matching byte (borrows only run upwards).
			x := binary.LittleEndian.Uint64(data[i:])
			q := x ^ (lsb * '"')
			b := x ^ (lsb * '\\')
			m := ((q - lsb) &^ q) | ((b - lsb) &^ b) | ((x - lsb*0x20) &^ x)
			if m &= msb; m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < len(data) && plain[data[i]] {
				i++
			}
			if i >= len(data) {
				return 0, false, errEOF(len(data))
			}
		}
		switch data[i] {
		case '"':
			return i + 1, esc, nil
		case '\\':
			esc = true
			if i+1 >= len(data) {
				return 0, false, errEOF(len(data))
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(data) {
						return 0, false, errEOF(len(data))
					}
					if unhex(data[k]) < 0 {
						return 0, false, errChar(data, k, `in \u hexadecimal character escape`)
					}
				}
				i += 6
			default:
				return 0, false, errChar(data, i+1, "in string escape code")
			}
		default:
			return 0, false, errChar(data, i, "in string literal")
		}
	}
}

// scanLiteral validates the literal lit (true, false or null) at data[i] and returns the index after it.
func scanLiteral(data []byte, i int, lit string) (int, error) {
	if i+len(lit) <= len(data) && string(data[i:i+len(lit)]) == lit {
		return i + len(lit), nil
	}
	for k := 1; k < len(lit); k++ {
		if i+k >= len(data) {
			return 0, errEOF(len(data))
		}
		if data[i+k] != lit[k] {
			return 0, errChar(data, i+k, "in literal "+lit+" (expecting "+quoteByte(lit[k])+")")
		}
	}
	panic("unreachable")
}

// scanNumber validates the number at data[i] (which is '-' or a digit) and returns the index after it.
func scanNumber(data []byte, i int) (int, error) {
	n := len(data)
	if data[i] == '-' {
		i++
		if i >= n {
			return 0, errEOF(n)
		}
	}
	switch c := data[i]; {
	case c == '0':
		i++
	case c-'1' <= 8:
		i++
		for i < n && data[i]-'0' <= 9 {
			i++
		}
	default:
		return 0, errChar(data, i, "in numeric literal")
	}
	if i < n && data[i] == '.' {
		i++
		if i >= n {
			return 0, errEOF(n)
		}
		if data[i]-'0' > 9 {
			return 0, errChar(data, i, "after decimal point in numeric literal")
		}
		for i < n && data[i]-'0' <= 9 {
			i++
		}
	}
	if i < n && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < n && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= n {
			return 0, errEOF(n)
		}
		if data[i]-'0' > 9 {
			return 0, errChar(data, i, "in exponent of numeric literal")
		}
		for i < n && data[i]-'0' <= 9 {
			i++
		}
	}
	return i, nil
}

// matchKey says which routing member (memberID...) the key with the (valid, undecoded) body raw names, or
// 0 for none.
func matchKey(raw []byte, esc bool) int {
	if esc {
		// Each byte of an ASCII name is written in at most six bytes (\u0074); longer keys cannot match.
		const longest = 6 * len("timestamp")
		if len(raw) > longest {
			return 0
		}
		var buf [3 * longest]byte // decoding at most triples the length: no allocation
		raw = appendUnquote(buf[:0], raw)
	}
	switch string(raw) {
	case "id":
		return memberID
	case "type":
		return memberType
	case "timestamp":
		return memberTimestamp
	}
	return 0
}

// buildFields decodes the recorded members. All strings share one allocation.
func buildFields(mem *[3]member) Fields {
	size, clean := 0, true
	for k := range mem {
		m := &mem[k]
		if m.kind != KindString {
			continue
		}
		if m.esc || !utf8.Valid(m.raw) {
			m.esc = true // needs decoding
			clean = false
			size += 3 * len(m.raw) // decoding at most triples the length
		} else {
			size += len(m.raw)
		}
	}
	var all string
	var end [3]int
	switch {
	case size == 0:
	case clean: // the common case: copy the bodies as they are
		var sb strings.Builder
		sb.Grow(size)
		for k := range mem {
			sb.Write(mem[k].raw)
			end[k] = sb.Len()
		}
		all = sb.String()
	default:
		var scratch [256]byte
		buf := scratch[:0]
		if size > len(scratch) {
			buf = make([]byte, 0, size)
		}
		for k := range mem {
			if mem[k].esc {
				buf = appendUnquote(buf, mem[k].raw)
			} else {
				buf = append(buf, mem[k].raw...)
			}
			end[k] = len(buf)
		}
		all = string(buf)
	}
	return Fields{
		ID:        all[0:end[0]],
		Type:      all[end[0]:end[1]],
		TypeKind:  mem[1].kind,
		Timestamp: all[end[1]:end[2]],
	}
}

// appendUnquote appends the decoded form of the valid JSON string body raw to dst, exactly as
// encoding/json decodes it: escapes resolved, a \u escape of an unpaired surrogate and every byte of
// invalid UTF-8 replaced by U+FFFD.
func appendUnquote(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch raw[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := getu4(raw[i:])
				i += 6
				if utf16.IsSurrogate(r) {
					if dec := utf16.DecodeRune(r, getu4(raw[i:])); dec != utf8.RuneError {
						dst = utf8.AppendRune(dst, dec)
						i += 6
						continue
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, raw[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
		}
	}
	return dst
}

// getu4 decodes the \uXXXX escape at the start of s, or returns -1 if there is none.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		h := unhex(c)
		if h < 0 {
			return -1
		}
		r = r<<4 | h
	}
	return r
}

// unhex returns the value of the hexadecimal digit c, or -1.
func unhex(c byte) rune {
	switch {
	case c-'0' <= 9:
		return rune(c - '0')
	case c-'a' <= 5:
		return rune(c - 'a' + 10)
	case c-'A' <= 5:
		return rune(c - 'A' + 10)
	}
	return -1
}

// skipPlain returns the index of the first byte from i on that may end a string or need scanString (a
// quote, a backslash or a control character), examining 8 bytes at a time; it stops early, at most 7
// bytes before the end, leaving the tail to the caller's checks. It is small enough to be inlined.
func skipPlain(data []byte, i int) int {
	for ; i+8 <= len(data); i += 8 {
		x := binary.LittleEndian.Uint64(data[i:])
		q, b := x^(lsb*'"'), x^(lsb*'\\')
		if m := ((q-lsb)&^q | (b-lsb)&^b | (x-lsb*0x20)&^x) & msb; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	return i
}
