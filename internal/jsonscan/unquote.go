package jsonscan

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// AppendUnquote appends the decoded form of a string body raw, as String or Member returned it, to dst,
// exactly as encoding/json decodes a string: escapes resolved, a \u escape of an unpaired surrogate and
// every byte of invalid UTF-8 replaced by U+FFFD.
func AppendUnquote(dst, raw []byte) []byte {
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

// Unquote returns the decoded form of a string body raw (see AppendUnquote); esc says whether it holds
// an escape, as String and Member report. A body without escapes in valid UTF-8 is copied as it is.
func Unquote(raw []byte, esc bool) string {
	if !esc && utf8.Valid(raw) {
		return string(raw)
	}
	return string(AppendUnquote(make([]byte, 0, len(raw)), raw))
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

// Equal reports whether the string body raw (a key, as Member returns it) decodes to name, which must be
// ASCII. It does not allocate for names up to ten characters.
func Equal(raw []byte, esc bool, name string) bool {
	if !esc {
		return string(raw) == name
	}
	var buf [64]byte
	d, ok := decodeName(buf[:0], raw, name)
	return ok && string(d) == name
}

// EqualFold reports whether the string body raw names the struct field name, which must be ASCII, as
// encoding/json matches a member to a field when it decodes an object into a struct: the decoded key
// equals name exactly or under Unicode case folding ("Stream" names "stream", and so does "ſtream", with
// U+017F LATIN SMALL LETTER LONG S). It does not allocate for names up to ten characters.
func EqualFold(raw []byte, esc bool, name string) bool {
	if !esc {
		// Without escapes, folding the body as it is gives the same as decoding it first (invalid UTF-8
		// folds to nothing ASCII either way); a character that folds to an ASCII letter takes one to
		// three bytes, so a shorter body cannot match.
		return string(raw) == name || len(raw) >= len(name) && bytes.EqualFold(raw, []byte(name))
	}
	var buf [64]byte
	d, ok := decodeName(buf[:0], raw, name)
	return ok && bytes.EqualFold(d, []byte(name))
}

// decodeName decodes raw into buf when it may stand for the ASCII name: each character of the name takes
// at most six bytes in raw (\u0074, or three for a character that folds to an ASCII letter, such as
// U+212A KELVIN SIGN). ok is false when raw is longer.
func decodeName(buf, raw []byte, name string) (d []byte, ok bool) {
	if len(raw) > 6*len(name) {
		return nil, false
	}
	return AppendUnquote(buf, raw), true
}
