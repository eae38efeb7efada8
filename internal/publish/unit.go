package publish

import (
	"github.com/tracking-bridge/tracking-bridge/internal/jsonscan"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

// unitPath is where a tracking event names the loading unit it observed (docs/subjects.md#subjects).
var unitPath = [...]string{"observation", "observedLoadingUnit", "loadingUnit", "number"}

// UnitOf returns the unit token of the tracking event data (layout.UnitToken of the string
// observation.observedLoadingUnit.loadingUnit.number), or layout.NoUnit when the path is missing, a step
// on it is not an object, the number is not a string, or data is not valid JSON. Keys are compared
// exactly after decoding their escapes; of keys given twice at one level, the last one counts, as for
// the routing fields.
func UnitOf(data []byte) string {
	var s jsonscan.Scanner
	s.Reset(data)
	number, ok := unitNumber(&s, 0)
	if s.End() != nil || !ok {
		return layout.NoUnit
	}
	return layout.UnitToken(number)
}

// unitNumber reads the object at the scanner's position, looking for unitPath[depth:], and returns the
// decoded number when it is a string. It reads the object to its end either way.
func unitNumber(s *jsonscan.Scanner, depth int) (number string, ok bool) {
	if s.Kind() != jsonscan.Object {
		s.Skip()
		return "", false
	}
	s.Object()
	for key, esc, more := s.Member(); more; key, esc, more = s.Member() {
		if !jsonscan.Equal(key, esc, unitPath[depth]) {
			s.Skip()
			continue
		}
		number, ok = "", false // a later key of the same name counts instead
		switch {
		case depth < len(unitPath)-1:
			number, ok = unitNumber(s, depth+1)
		case s.Kind() == jsonscan.String:
			raw, esc := s.String()
			number, ok = jsonscan.Unquote(raw, esc), true
		default:
			s.Skip()
		}
	}
	return number, ok
}
