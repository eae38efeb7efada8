package publish

import "github.com/tracking-bridge/tracking-bridge/internal/subjects"

// TypeToken maps an event's type to its subject token (docs/subjects.md#subjects) with internal/subjects, the
// one mapping the daemon and package tracking share: a missing or non-string type gives "UNKNOWN", like an
// empty one.
func TypeToken(typ string, kind Kind) string {
	if kind != KindString {
		return subjects.UnknownType
	}
	return subjects.TypeToken(typ)
}
