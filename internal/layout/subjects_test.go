package layout

import (
	"fmt"
	"strings"
	"testing"
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
		{Event("tracking", "GATE IN"), "tracking.events.GATE_IN"},
		{Event("tracking", ""), "tracking.events.UNKNOWN"},
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
	fmt.Println(Event(prefix, "GATE_IN"), Event(prefix, "gate in."), Reports(prefix), EventsStream(prefix))
	// Output: tracking.events.GATE_IN tracking.events.gate_in_ tracking.reports TRACKING_EVENTS
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
