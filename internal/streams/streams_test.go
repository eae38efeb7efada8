package streams_test

import (
	"strings"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/streams"
)

func TestStreamNames(t *testing.T) {
	tests := []struct{ prefix, want string }{
		{"tracking", "TRACKING"},
		{"acme.tracking", "ACME_TRACKING"},
		{"acme-prod_v2", "ACME_PROD_V2"},
		{"trück", "TR_CK"},
	}
	for _, tt := range tests {
		l := streams.Layout{Prefix: tt.prefix}
		if l.Events() != tt.want+"_EVENTS" || l.Reports() != tt.want+"_REPORTS" || l.DLQ() != tt.want+"_DLQ" {
			t.Errorf("prefix %q: %s %s %s, want %s_*", tt.prefix, l.Events(), l.Reports(), l.DLQ(), tt.want)
		}
	}
	l := streams.Layout{Prefix: "tracking"}
	if l.ReportsSubject() != "tracking.reports" || l.ReportsDLQSubject() != "tracking.dlq.reports" {
		t.Errorf("subjects %s %s", l.ReportsSubject(), l.ReportsDLQSubject())
	}
}

// FuzzStreamName: any prefix gives a usable JetStream stream name.
func FuzzStreamName(f *testing.F) {
	for _, s := range []string{"tracking", "a.b-c", "ü*>. ", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prefix string) {
		got := streams.Layout{Prefix: prefix}.Events()
		if strings.TrimFunc(got, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' }) != "" {
			t.Errorf("prefix %q gives stream name %q: not [A-Z0-9_]+", prefix, got)
		}
	})
}
