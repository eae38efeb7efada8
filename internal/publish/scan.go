package publish

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tracking-bridge/tracking-bridge/internal/jsonscan"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

// Fields are the members of a tracking event that the bridge routes on: three top-level ones, and the
// loading unit's number, which gives the subject's unit token.
type Fields struct {
	ID        string // decoded string value of top-level "id"; "" if absent or not a string
	Type      string // decoded string value of top-level "type"
	TypeKind  Kind   // KindMissing, KindString, KindOther (present but not a string, incl. null)
	Timestamp string // decoded string value of top-level "timestamp"; "" if absent / not a string
	// Unit is the unit token (layout.UnitToken) of the string observation.observedLoadingUnit.loadingUnit.number,
	// or layout.NoUnit when the path is missing, a step on it is not an object, or the number is not a
	// string. ScanEvent's error leaves it "".
	Unit string
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

// Indexes into the recorded members (plus one, so that zero means "not a routing member"). memberUnit
// is the loading unit's number, found under the top-level member "observation" (unitPath).
const (
	memberID = 1 + iota
	memberType
	memberTimestamp
	memberUnit
	numMembers = memberUnit
)

// unitPath is where a tracking event names the loading unit it observed (docs/subjects.md#subjects).
var unitPath = [...]string{"observation", "observedLoadingUnit", "loadingUnit", "number"}

// ScanEvent validates data as one JSON value that is an object (RFC 8259, same acceptance as
// encoding/json.Valid, plus: must be an object, surrounding whitespace allowed) and returns its routing
// fields, all in the one pass that validates it: the walk steps into "observation" to find the loading
// unit and skips everything else. The error says precisely what is wrong ("invalid JSON at byte 17: ...",
// "not a JSON object").
//
// Only top-level members count for id, type and timestamp, and only the path unitPath for the unit; of
// duplicate keys at one level the last one wins (a later "observation" without a unit leaves none), and
// keys are compared exactly (case-sensitively) after decoding their escapes. String values are decoded as encoding/json decodes
// them into a string (escapes resolved, invalid UTF-8 and unpaired surrogates replaced by U+FFFD).
// ScanEvent does not retain data; the returned strings share at most one allocation.
func ScanEvent(data []byte) (Fields, error) {
	var s jsonscan.Scanner
	s.Reset(data)
	if k := s.Kind(); k != jsonscan.Object {
		s.Skip()
		if err := s.End(); err != nil {
			return Fields{}, err
		}
		return Fields{}, notObject(k)
	}
	var mem [numMembers]member
	s.Object()
	for key, esc, ok := s.Member(); ok; key, esc, ok = s.Member() {
		m := matchKey(key, esc)
		switch {
		case m == 0:
			s.Skip()
		case m == memberUnit:
			mem[m-1] = unitMember(&s, 1)
		case s.Kind() == jsonscan.String:
			raw, esc := s.String()
			mem[m-1] = member{raw: raw, kind: KindString, esc: esc}
		default:
			s.Skip()
			mem[m-1] = member{kind: KindOther}
		}
	}
	if err := s.End(); err != nil {
		return Fields{}, err
	}
	return buildFields(&mem), nil
}

// notObject returns the error for a valid JSON value of kind k that is not an object.
func notObject(k jsonscan.Kind) error {
	switch k {
	case jsonscan.Array:
		return errTopArray
	case jsonscan.String:
		return errTopString
	case jsonscan.True:
		return errTopTrue
	case jsonscan.False:
		return errTopFalse
	case jsonscan.Null:
		return errTopNull
	}
	return errTopNumber
}

// matchKey says which routing member (memberID...) the key with the (valid, undecoded) body raw names, or
// 0 for none.
func matchKey(raw []byte, esc bool) int {
	if esc {
		// Each byte of an ASCII name is written in at most six bytes (\u0074); longer keys cannot match.
		const longest = 6 * len("observation")
		if len(raw) > longest {
			return 0
		}
		var buf [3 * longest]byte // decoding at most triples the length: no allocation
		raw = jsonscan.AppendUnquote(buf[:0], raw)
	}
	switch string(raw) {
	case "id":
		return memberID
	case "type":
		return memberType
	case "timestamp":
		return memberTimestamp
	case unitPath[0]:
		return memberUnit
	}
	return 0
}

// unitMember reads the value at the scanner's position, an object in which unitPath[depth:] is looked
// for, to its end, and returns the number it finds there when that is a string (else a member of
// KindMissing).
func unitMember(s *jsonscan.Scanner, depth int) member {
	if s.Kind() != jsonscan.Object {
		s.Skip()
		return member{}
	}
	var found member
	s.Object()
	for key, esc, more := s.Member(); more; key, esc, more = s.Member() {
		switch {
		case !jsonscan.Equal(key, esc, unitPath[depth]):
			s.Skip()
		case depth < len(unitPath)-1:
			found = unitMember(s, depth+1) // a later key of the same name counts instead
		case s.Kind() == jsonscan.String:
			raw, esc := s.String()
			found = member{raw: raw, kind: KindString, esc: esc}
		default:
			s.Skip()
			found = member{}
		}
	}
	return found
}

// buildFields decodes the recorded members. All strings share one allocation, the unit token too unless
// the number needs mapping (layout.UnitToken returns a number that is a token already as it is).
func buildFields(mem *[numMembers]member) Fields {
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
	var end [numMembers]int
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
				buf = jsonscan.AppendUnquote(buf, mem[k].raw)
			} else {
				buf = append(buf, mem[k].raw...)
			}
			end[k] = len(buf)
		}
		all = string(buf)
	}
	unit := layout.NoUnit
	if mem[memberUnit-1].kind == KindString {
		unit = layout.UnitToken(all[end[2]:end[3]])
	}
	return Fields{
		ID:        all[0:end[0]],
		Type:      all[end[0]:end[1]],
		TypeKind:  mem[1].kind,
		Timestamp: all[end[1]:end[2]],
		Unit:      unit,
	}
}
