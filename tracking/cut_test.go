package tracking

import (
	"testing"
	"unicode/utf8"
)

// TestCutOnACharacter: a value quoted in an error is cut on a character's boundary.
func TestCutOnACharacter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 40, "short"},
		{"abcdef", 3, "abc…"},
		{"abü", 3, "ab…"}, // ü is two bytes: cutting at 3 would split it
		{"ü", 1, "…"},
	} {
		got := cut(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
