package publish

import (
	"strings"

	"github.com/tracking-bridge/tracking-bridge/internal/subjects"
)

// TypeToken maps an event's type to its subject token (contract §3) with internal/subjects, the one
// mapping the daemon and package tracking share: a missing or non-string type gives "UNKNOWN", like an
// empty one.
func TypeToken(typ string, kind Kind) string {
	if kind != KindString {
		return subjects.UnknownType
	}
	return subjects.TypeToken(typ)
}

// headerValue removes control characters (which would break the NATS header block) from a header value.
func headerValue(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return strings.Map(func(r rune) rune {
				if r < 0x20 || r == 0x7f {
					return -1
				}
				return r
			}, s)
		}
	}
	return s
}
