// Package rfc3339 parses RFC 3339 date-times (section 5.6) strictly: time.Parse with time.RFC3339 also
// accepts a comma before the fraction and zone offsets up to ±24:59, which RFC 3339 does not, and rejects
// the lower-case "t" and "z" it allows.
package rfc3339

import (
	"strings"
	"time"
)

// datePart is the fixed-width part of a date-time, up to the seconds.
const datePart = len("2006-01-02T15:04:05")

// Parse parses s as an RFC 3339 date-time: "2006-01-02T15:04:05", an optional fraction of one or more
// digits after ".", then "Z" or a numeric offset ±hh:mm (hh at most 23, mm at most 59). "T" and "Z" may be
// lower case (section 5.6, note). It returns the time, and the fraction ("" or ".5") and the zone ("Z",
// "z" or "+01:00") as written.
func Parse(s string) (t time.Time, frac, zone string, ok bool) {
	if len(s) <= datePart || len(s) > 64 {
		return t, "", "", false
	}
	zone = s[datePart:]
	if zone[0] == '.' {
		i := 1
		for i < len(zone) && '0' <= zone[i] && zone[i] <= '9' {
			i++
		}
		if i == 1 {
			return t, "", "", false
		}
		frac, zone = zone[:i], zone[i:]
	}
	if zone != "Z" && zone != "z" && !offset(zone) {
		return t, "", "", false
	}
	norm := s
	if s[10] == 't' || zone == "z" {
		norm = strings.ToUpper(s) // digits, separators and the two letters: nothing else changes
	}
	t, err := time.Parse(time.RFC3339Nano, norm)
	return t, frac, zone, err == nil
}

// Valid reports whether s is an RFC 3339 date-time.
func Valid(s string) bool {
	_, _, _, ok := Parse(s)
	return ok
}

// offset reports whether z is a numeric zone offset ±hh:mm of RFC 3339.
func offset(z string) bool {
	return len(z) == 6 && (z[0] == '+' || z[0] == '-') && twoDigits(z[1:3], 23) && z[3] == ':' && twoDigits(z[4:], 59)
}

func twoDigits(s string, max int) bool {
	return '0' <= s[0] && s[0] <= '9' && '0' <= s[1] && s[1] <= '9' && int(s[0]-'0')*10+int(s[1]-'0') <= max
}
