package jsonscan

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
)

// MaxDepth is the deepest nesting of objects and arrays accepted: encoding/json's limit, so that the
// scanner accepts exactly what json.Valid accepts.
const MaxDepth = 10000

// SyntaxError reports invalid JSON and the byte offset at which it was detected. Its message uses
// encoding/json's words ("invalid character 'x' after object key:value pair").
type SyntaxError struct {
	Offset int // where the input stops being JSON
	msg    string
}

func (e *SyntaxError) Error() string {
	return "invalid JSON at byte " + strconv.Itoa(e.Offset) + ": " + e.msg
}

func errEOF(n int) error {
	return &SyntaxError{Offset: n, msg: "unexpected end of input"}
}

func errChar(data []byte, i int, context string) error {
	return &SyntaxError{Offset: i, msg: "invalid character " + quoteByte(data[i]) + " " + context}
}

func errDepth(i int) error {
	return &SyntaxError{Offset: i, msg: "exceeded max depth of " + strconv.Itoa(MaxDepth)}
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

// scanString validates the rest of a string body from data[i], which is anywhere in the body up to its
// first backslash. It returns the index just after the closing quote and whether the body contains a
// backslash escape. Callers inline the common case (skipPlain finds the closing quote) and call it for
// the rest.
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
