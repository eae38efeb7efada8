package units

import (
	"strings"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// stamp is where an event stands in its unit's order: its timestamp as an instant, then its id.
type stamp struct {
	at time.Time
	id string
}

// after reports whether s is later than o: a later instant, or the same instant and a larger id
// (bytewise). An event is not after itself.
func (s stamp) after(o stamp) bool {
	if c := s.at.Compare(o.at); c != 0 {
		return c > 0
	}
	return s.id > o.id
}

// timestampOf returns the instant of the event data's top-level timestamp, and false when the data is not
// a JSON object or its timestamp is missing, not a string, or not an RFC 3339 time. Offsets and fractions
// of any length are read exactly: "2026-01-02T11:00:00+01:00" and "2026-01-02T10:00:00.000000000Z" are
// the same instant.
func timestampOf(data []byte) (time.Time, bool) {
	f, err := publish.ScanEvent(data)
	if err != nil || f.Timestamp == "" {
		return time.Time{}, false
	}
	t, _, _, ok := rfc3339.Parse(f.Timestamp)
	return t, ok
}

// unitOf returns the unit token of an event stored on subject with data: the subject's last token on
// P.events.<TYPE>.<UNIT>, or publish.UnitOf(data) on the older P.events.<TYPE>. A token that is not one
// layout.UnitToken could have made (a foreign publisher's) counts as no unit.
func unitOf(base, subject string, data []byte) string {
	rest, ok := strings.CutPrefix(subject, base)
	if !ok {
		return layout.NoUnit
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return publish.UnitOf(data)
	}
	unit := rest[i+1:]
	if unit == layout.NoUnit || layout.UnitToken(unit) != unit {
		return layout.NoUnit
	}
	return unit
}
