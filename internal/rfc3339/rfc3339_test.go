package rfc3339_test

import (
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

func TestParse(t *testing.T) {
	for _, s := range []string{
		"2024-05-01T12:30:00Z", "2024-05-01t12:30:00z", "2024-05-01T12:30:00.5+01:00",
		"2024-05-01T12:30:00.123456789-23:59", "2024-05-01T12:30:00+00:00", "2024-05-01T12:30:00.000000000001Z",
	} {
		if _, _, _, ok := rfc3339.Parse(s); !ok {
			t.Errorf("Parse(%q) failed", s)
		}
	}
	for _, s := range []string{
		"", "2024-05-01", "2024-05-01T12:30:00", "2024-05-01 12:30:00Z", "2024-05-01T12:30:00,5Z",
		"2024-05-01T12:30:00.Z", "2024-05-01T12:30:00+24:00", "2024-05-01T12:30:00+01:60", "2024-05-01T12:30:00+0100",
		"2024-05-01T24:00:00Z", "2024-02-30T12:30:00Z", "2024-05-01T12:30:00ZZ", "2024-05-01T12:30:00 Z", "noon",
	} {
		if _, _, _, ok := rfc3339.Parse(s); ok {
			t.Errorf("Parse(%q) accepted it", s)
		}
	}
	ts, frac, zone, ok := rfc3339.Parse("2025-03-14t10:15:00.50+01:00")
	if !ok || frac != ".50" || zone != "+01:00" || !ts.Equal(time.Date(2025, 3, 14, 9, 15, 0, 5e8, time.UTC)) {
		t.Errorf("Parse = %v, %q, %q, %v", ts, frac, zone, ok)
	}
}

// FuzzParse: whatever Parse accepts, time.Parse accepts too (upper-cased), at the same instant.
func FuzzParse(f *testing.F) {
	f.Add("2024-05-01T12:30:00.5+01:00")
	f.Add("2024-05-01t12:30:00z")
	f.Fuzz(func(t *testing.T, s string) {
		ts, _, _, ok := rfc3339.Parse(s)
		if !ok {
			return
		}
		want, err := time.Parse(time.RFC3339Nano, upper(s))
		if err != nil || !want.Equal(ts) {
			t.Fatalf("Parse(%q) = %v; time.Parse: %v, %v", s, ts, want, err)
		}
	})
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == 't' || c == 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
