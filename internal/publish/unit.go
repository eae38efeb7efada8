package publish

import "github.com/tracking-bridge/tracking-bridge/internal/layout"

// UnitOf returns the unit token of the tracking event data, as ScanEvent reads it into Fields.Unit (the
// same walk): layout.UnitToken of the string observation.observedLoadingUnit.loadingUnit.number, or
// layout.NoUnit when the path is missing, a step on it is not an object, the number is not a string, or
// data is not a JSON object. For readers of stored events; the publisher takes the unit from its one
// scan of each event.
func UnitOf(data []byte) string {
	f, err := ScanEvent(data)
	if err != nil {
		return layout.NoUnit
	}
	return f.Unit
}
