package tracking_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// typeSamples are event types that exercise every rule of the token: clean, to be replaced, multi-byte,
// invalid UTF-8, at and around the 64-character cut, and white space and wildcards.
var typeSamples = []string{
	"GATE_IN", "GATE_OUT", "LOADED_ON_BARGE", "gate-out", "a.b", "*", ">", " ", "GATE IN", "X\r\nY", "Zöll",
	"", "\xff\xfe", "日本", "a\x00b", strings.Repeat("A", 63), strings.Repeat("A", 64), strings.Repeat("A", 65),
	strings.Repeat("é", 70), strings.Repeat("A", 63) + "é", strings.Repeat("A", 64) + ".", "$JS.API", "tab\there",
}

// TestTypeToken: the tokens of docs/subjects.md#subjects (TypeToken is the bridge's own mapping,
// internal/layout).
func TestTypeToken(t *testing.T) {
	for typ, want := range map[string]string{
		"GATE_IN": "GATE_IN", "gate-out": "gate-out", "a.b": "a_b", "*": "_", ">": "_", "GATE IN": "GATE_IN",
		"Zöll": "Z_ll", "": "UNKNOWN", "日本": "__", "$JS.API": "_JS_API",
		strings.Repeat("A", 65): strings.Repeat("A", 64),
	} {
		if got := tracking.TypeToken(typ); got != want {
			t.Errorf("TypeToken(%q) = %q, want %q", typ, got, want)
		}
	}
}

// FuzzTypeToken: any type gives a usable subject token.
func FuzzTypeToken(f *testing.F) {
	for _, s := range typeSamples {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, typ string) {
		got := tracking.TypeToken(typ)
		if got == "" || len(got) > 64 || strings.ContainsAny(got, ".*> \t\r\n") || !utf8.ValidString(got) {
			t.Fatalf("TypeToken(%q) = %q is not a subject token", typ, got)
		}
	})
}

// TestSubjectsAgreeWithBridge: the names of Subjects are the bridge's, for prefixes with dots, dashes and
// mixed case.
func TestSubjectsAgreeWithBridge(t *testing.T) {
	for _, prefix := range []string{"tracking", "acme.tracking", "Acme-Track_9", "a.b-c"} {
		s, l := tracking.Subjects{Prefix: prefix}, layout.Streams{Prefix: prefix}
		configs := l.Configs()
		for _, c := range []struct{ name, got, want string }{
			{"events stream", s.EventsStream(), l.Events()},
			{"reports stream", s.ReportsStream(), l.Reports()},
			{"DLQ stream", s.DLQStream(), l.DLQ()},
			{"reports", s.Reports(), l.ReportsSubject()},
			{"DLQ reports", s.DLQReports(), l.ReportsDLQSubject()},
			{"events", s.Events(), configs[0].Subjects[0]},
			{"DLQ", s.DLQ(), configs[2].Subjects[0]},
			{"DLQ events", s.DLQEvents(), prefix + ".dlq.events"},
			{"event", s.Event("GATE IN", "msku 1"), layout.EventSubject(prefix, layout.TypeToken("GATE IN"), layout.UnitToken("msku 1"))},
			{"events of type", s.EventsOfType("GATE IN"), layout.EventsOfType(prefix, "GATE IN")},
			{"events of unit", s.EventsOfUnit("msku 1"), layout.EventsOfUnit(prefix, "msku 1")},
		} {
			if c.got != c.want {
				t.Errorf("prefix %q, %s: %q, the bridge uses %q", prefix, c.name, c.got, c.want)
			}
		}
		if configs[0].Name != s.EventsStream() || configs[1].Subjects[0] != s.Reports() {
			t.Errorf("prefix %q: the bridge's streams %+v", prefix, configs)
		}
		svc := service.New(nil, nil, service.Config{Prefix: prefix})
		for _, op := range service.EndpointNames() {
			if s.API(op) != svc.Subject(op) {
				t.Errorf("prefix %q: API(%q) = %q, the service serves %q", prefix, op, s.API(op), svc.Subject(op))
			}
		}
	}
	if got := (tracking.Subjects{}).Events(); got != "tracking.events.>" {
		t.Errorf("the zero Subjects: %q", got)
	}
}

// TestNamesAgreeWithBridge: the operations and header names are the service's and the publisher's.
func TestNamesAgreeWithBridge(t *testing.T) {
	ops := []string{tracking.OpSearchLocations, tracking.OpListOrders, tracking.OpCreateOrder, tracking.OpGetOrder,
		tracking.OpUpdateOrder, tracking.OpDeleteOrder, tracking.OpQueryTracking, tracking.OpReportEvent,
		tracking.OpUnitLatest, tracking.OpUnitEvents}
	if !slices.Equal(ops, service.EndpointNames()) {
		t.Errorf("operations %q, the service serves %q", ops, service.EndpointNames())
	}
	for _, c := range [][2]string{
		{tracking.HeaderTimeout, service.TimeoutHeader},
		{tracking.HeaderIdempotencyKey, service.IdempotencyKeyHeader},
		{tracking.HeaderUpstreamStatus, service.UpstreamStatusHeader},
		{tracking.HeaderRetryAfter, service.RetryAfterHeader},
		{tracking.HeaderUnit, service.UnitHeader},
		{tracking.HeaderErrorCode, micro.ErrorCodeHeader},
		{tracking.HeaderError, micro.ErrorHeader},
		{tracking.HeaderMsgID, publish.HeaderMsgID},
		{tracking.HeaderMsgID, jetstream.MsgIDHeader},
		{tracking.HeaderEventID, publish.HeaderEventID},
		{tracking.HeaderEventType, publish.HeaderEventType},
	} {
		if c[0] != c[1] {
			t.Errorf("header %q, the bridge uses %q", c[0], c[1])
		}
	}
}
