package layout

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestTypeToken(t *testing.T) {
	for _, tt := range []struct{ typ, want string }{
		{"GATE_IN", "GATE_IN"},
		{"LOADED_ON_BARGE", "LOADED_ON_BARGE"},
		{"gate-out", "gate-out"},
		{"a.b", "a_b"},
		{"*", "_"},
		{">", "_"},
		{"GATE IN", "GATE_IN"},
		{"X\r\nY", "X__Y"},
		{"Zöll", "Z_ll"},
		{"日本", "__"},
		{"\xff\xfe", "__"},
		{"$JS.API", "_JS_API"},
		{"", UnknownType},
		{strings.Repeat("A", 64), strings.Repeat("A", 64)},
		{strings.Repeat("A", 65), strings.Repeat("A", 64)},
		{strings.Repeat("A", 64) + ".", strings.Repeat("A", 64)},
		{strings.Repeat("A", 63) + "é", strings.Repeat("A", 63) + "_"},
		{strings.Repeat("é", 100), strings.Repeat("_", 64)},
	} {
		if got := TypeToken(tt.typ); got != tt.want {
			t.Errorf("TypeToken(%q) = %q, want %q", tt.typ, got, tt.want)
		}
	}
}

// A type that is a token already, the common case on the event path, costs no allocation.
func TestTypeTokenCleanDoesNotAllocate(t *testing.T) {
	typ := strings.Clone("HANDLING_FINISHED")
	if n := testing.AllocsPerRun(100, func() { _ = TypeToken(typ) }); n != 0 {
		t.Errorf("TypeToken of a clean type allocates %v times", n)
	}
}

// FuzzTypeToken: whatever the type, the token is one non-empty NATS subject token of at most 64 bytes
// from [A-Za-z0-9_-], and a type that is such a token already is kept.
func FuzzTypeToken(f *testing.F) {
	for _, s := range []string{"GATE_IN", "a.b.c", "*", ">", " ", "\r\n", "", "\xff\xfe", "日本", strings.Repeat("é", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, typ string) {
		tok := TypeToken(typ)
		if tok == "" || len(tok) > MaxTypeToken || !utf8.ValidString(tok) {
			t.Fatalf("TypeToken(%q) = %q", typ, tok)
		}
		for i := 0; i < len(tok); i++ {
			if !tokenByte(tok[i]) {
				t.Fatalf("TypeToken(%q) = %q has byte %q", typ, tok, tok[i])
			}
		}
		if typ != "" && utf8.ValidString(typ) && utf8.RuneCountInString(typ) <= MaxTypeToken &&
			len(tok) != utf8.RuneCountInString(typ) {
			t.Fatalf("TypeToken(%q) = %q does not keep one character per character", typ, tok)
		}
		if typ != "" && len(typ) <= MaxTypeToken && strings.Trim(typ, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == "" && tok != typ {
			t.Fatalf("TypeToken(%q) = %q changed a token", typ, tok)
		}
	})
}

func TestNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Events("tracking"), "tracking.events.>"},
		{EventsOfType("tracking", ""), "tracking.events.UNKNOWN.*"},
		{Event("tracking", "GATE IN"), "tracking.events.GATE_IN"},
		{FenceFilter("tracking"), "tracking.leader.>"},
		{Reports("acme.t"), "acme.t.reports"},
		{DLQ("acme.t"), "acme.t.dlq.>"},
		{DLQEvents("acme.t"), "acme.t.dlq.events"},
		{DLQReports("acme.t"), "acme.t.dlq.reports"},
		{API("acme.t", "orders.get"), "acme.t.api.orders.get"},
		{EventsStream(DefaultPrefix), "TRACKING_EVENTS"},
		{ReportsStream("acme.tracking"), "ACME_TRACKING_REPORTS"},
		{DLQStream("Acme-Track_9"), "ACME_TRACK_9_DLQ"},
		{LeaseBucket("a.b-c"), "A_B_C_LEASES"},
		{UnitsBucket(DefaultPrefix), "TRACKING_UNITS"},
		{EventSubject("tracking", "GATE_IN", "MSKU1234567"), "tracking.events.GATE_IN.MSKU1234567"},
		{EventsOfType("tracking", "GATE IN"), "tracking.events.GATE_IN.*"},
		{EventsOfUnit("tracking", "msku 123456-7"), "tracking.events.*.MSKU1234567"},
		{EventsOfUnit("tracking", "--"), "tracking.events.*._"},
		{Stream("zöll", "X"), "Z_LL_X"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func Example() {
	const prefix = DefaultPrefix
	fmt.Println(EventSubject(prefix, TypeToken("GATE_IN"), UnitToken("msku 123456-5")))
	fmt.Println(EventsOfType(prefix, "gate in."), EventsOfUnit(prefix, "MSKU1234565"), Events(prefix))
	fmt.Println(Reports(prefix), EventsStream(prefix))
	// Output:
	// tracking.events.GATE_IN.MSKU1234565
	// tracking.events.gate_in_.* tracking.events.*.MSKU1234565 tracking.events.>
	// tracking.reports TRACKING_EVENTS
}

func TestUnitToken(t *testing.T) {
	for _, c := range []struct{ number, want string }{
		{"MSKU1234567", "MSKU1234567"},
		{"msku 123456-7", "MSKU1234567"},
		{" -./ ", NoUnit},
		{"", NoUnit},
		{strings.Repeat("A", MaxUnitToken), strings.Repeat("A", MaxUnitToken)},
		{strings.Repeat("A", MaxUnitToken+1), NoUnit},
		{strings.Repeat("a-", MaxUnitToken), strings.Repeat("A", MaxUnitToken)},
		{"ab\x00c\n", "ABC"},
		{"ıé1", "I1"}, // the dotless i's capital is ASCII; é's is not
		{"\xffAB", "AB"},
		{"MSKU.1234567*>", "MSKU1234567"},
	} {
		if got := UnitToken(c.number); got != c.want {
			t.Errorf("UnitToken(%q) = %q, want %q", c.number, got, c.want)
		}
	}
}

// A number that is a token already, the common case on the event path, costs no allocation.
func TestUnitTokenCleanDoesNotAllocate(t *testing.T) {
	number := strings.Clone("MSKU1234565")
	if n := testing.AllocsPerRun(100, func() { _ = UnitToken(number) }); n != 0 {
		t.Errorf("UnitToken of a clean number allocates %v times", n)
	}
}

// referenceUnitToken is the unit token rule written from its words, independently of UnitToken: each
// character upper-cased with unicode.ToUpper (an invalid byte reads as U+FFFD, which is no letter), the
// characters A-Z and 0-9 kept and every other removed; an empty result, or one of more than 64
// characters, is "_".
func referenceUnitToken(number string) string {
	var kept []rune
	for _, r := range number {
		if u := unicode.ToUpper(r); 'A' <= u && u <= 'Z' || '0' <= u && u <= '9' {
			kept = append(kept, u)
		}
	}
	if len(kept) == 0 || len(kept) > 64 {
		return "_"
	}
	return string(kept)
}

// FuzzUnitToken: UnitToken gives what the rule's words give (referenceUnitToken), a token is kept as it
// is, and the subject of an event with it has exactly one more token than its type's, with no wildcard.
func FuzzUnitToken(f *testing.F) {
	for _, s := range []string{"MSKU1234565", "msku 123456-5", "", " -./ ", "ı", "ﬀ", "ß", "ǆ", "\xffA", "a\x00b",
		"MSKU.1*2>", strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("é1", 70), "１２３", "ⅰⅱ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, number string) {
		tok := UnitToken(number)
		if want := referenceUnitToken(number); tok != want {
			t.Fatalf("UnitToken(%q) = %q, the rule gives %q", number, tok, want)
		}
		if UnitToken(tok) != tok && tok != NoUnit {
			t.Fatalf("UnitToken(%q) = %q, which maps again to %q", number, tok, UnitToken(tok))
		}
		subject := EventSubject("tracking", TypeToken("GATE_IN"), tok)
		if parts := strings.Split(subject, "."); len(parts) != 4 || parts[3] != tok || strings.ContainsAny(subject, "*> \t\r\n") {
			t.Fatalf("subject %q of unit %q is not four tokens without wildcards", subject, number)
		}
	})
}
