package publish

import (
	"fmt"
	"strconv"
	"strings"
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

var (
	errTopArray  = fmt.Errorf("%w: the top-level value is an array", ErrNotObject)
	errTopString = fmt.Errorf("%w: the top-level value is a string", ErrNotObject)
	errTopNumber = fmt.Errorf("%w: the top-level value is a number", ErrNotObject)
	errTopTrue   = fmt.Errorf("%w: the top-level value is true", ErrNotObject)
	errTopFalse  = fmt.Errorf("%w: the top-level value is false", ErrNotObject)
	errTopNull   = fmt.Errorf("%w: the top-level value is null", ErrNotObject)
)

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
