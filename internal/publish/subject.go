package publish

import "strings"

// maxTypeToken is the longest subject token an event type maps to (contract §3).
const maxTypeToken = 64

// TypeToken maps an event's type to its subject token (contract §3): characters outside [A-Za-z0-9_-]
// become "_", the result is cut at 64 characters, and a missing, empty or non-string type gives
// "UNKNOWN". The token never contains a wildcard, a dot or white space, and is never empty.
func TypeToken(typ string, kind Kind) string {
	if kind != KindString || typ == "" {
		return "UNKNOWN"
	}
	clean := true
	n := 0
	for i := 0; i < len(typ); i++ {
		if !tokenByte(typ[i]) {
			clean = false
			break
		}
		n++
	}
	if clean && n <= maxTypeToken {
		return typ // the common case: no allocation
	}
	var b strings.Builder
	b.Grow(min(len(typ), maxTypeToken))
	for _, r := range typ {
		if b.Len() == maxTypeToken {
			break
		}
		if r < 0x80 && tokenByte(byte(r)) {
			b.WriteByte(byte(r))
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
