package publish

import (
	"strings"
	"testing"
)

func TestTypeToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ  string
		kind Kind
		want string
	}{
		{"GATE_IN", KindString, "GATE_IN"},
		{"LOADED_ON_BARGE", KindString, "LOADED_ON_BARGE"},
		{"gate-out", KindString, "gate-out"},
		{"a.b", KindString, "a_b"},
		{"*", KindString, "_"},
		{">", KindString, "_"},
		{"GATE IN", KindString, "GATE_IN"},
		{"X\r\nY", KindString, "X__Y"},
		{"Zöll", KindString, "Z_ll"},
		{"", KindString, "UNKNOWN"},
		{"", KindMissing, "UNKNOWN"},
		{"", KindOther, "UNKNOWN"},
		{strings.Repeat("A", 100), KindString, strings.Repeat("A", 64)},
		{strings.Repeat("é", 100), KindString, strings.Repeat("_", 64)},
	}
	for _, tt := range tests {
		if got := TypeToken(tt.typ, tt.kind); got != tt.want {
			t.Errorf("TypeToken(%q, %v) = %q, want %q", tt.typ, tt.kind, got, tt.want)
		}
	}
}

func TestHeaderValue(t *testing.T) {
	t.Parallel()
	if got := headerValue("GATE\r\nIN\x00\x7f"); got != "GATEIN" {
		t.Errorf("headerValue = %q", got)
	}
	if got := headerValue("Zöll"); got != "Zöll" {
		t.Errorf("headerValue changed printable text: %q", got)
	}
}
