package publish

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTypeToken(t *testing.T) {
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
	if got := headerValue("GATE\r\nIN\x00\x7f"); got != "GATEIN" {
		t.Errorf("headerValue = %q", got)
	}
	if got := headerValue("Zöll"); got != "Zöll" {
		t.Errorf("headerValue changed printable text: %q", got)
	}
}

// FuzzTypeToken: whatever the type, the token is a single, non-empty, wildcard-free NATS subject token of
// at most 64 characters from [A-Za-z0-9_-].
func FuzzTypeToken(f *testing.F) {
	for _, s := range []string{"GATE_IN", "a.b.c", "*", ">", " ", "\r\n", "", "\xff\xfe", "LOADED_ON_BARGE"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, typ string) {
		tok := TypeToken(typ, KindString)
		if tok == "" || len(tok) > maxTypeToken {
			t.Fatalf("token %q of length %d", tok, len(tok))
		}
		for i := 0; i < len(tok); i++ {
			if !tokenByte(tok[i]) {
				t.Fatalf("token %q has byte %q", tok, tok[i])
			}
		}
		if typ != "" && utf8.ValidString(typ) && utf8.RuneCountInString(typ) <= maxTypeToken &&
			len(tok) != utf8.RuneCountInString(typ) {
			t.Fatalf("token %q does not keep one character per character of %q", tok, typ)
		}
	})
}
