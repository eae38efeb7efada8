package publish

import "github.com/tracking-bridge/tracking-bridge/internal/layout"

// TypeToken maps an event's type to its subject token (docs/subjects.md#subjects) with internal/layout, the
// one mapping the daemon and package tracking share: a missing or non-string type gives "UNKNOWN", like an
// empty one.
func TypeToken(typ string, kind Kind) string {
	if kind != KindString {
		return layout.UnknownType
	}
	return layout.TypeToken(typ)
}
