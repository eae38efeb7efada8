package upstream_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  upstream.Outcome
		want string
	}{
		{"messages first", upstream.Outcome{Kind: upstream.Reject, Status: 400, Messages: []string{"a", "b\r\nc"},
			Err: errors.New("ignored")}, "a; b  c"},
		{"then the error", upstream.Outcome{Kind: upstream.Retry, Err: errors.New("dial tcp: refused")}, "dial tcp: refused"},
		{"then the status", upstream.Outcome{Kind: upstream.Reject, Status: 409}, "HTTP 409 Conflict"},
		{"else the kind", upstream.Outcome{Kind: upstream.Retry}, "retry"},
	} {
		if got := tc.out.Reason(); got != tc.want {
			t.Errorf("%s: Reason() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[upstream.OutcomeKind]string{
		0: "invalid", upstream.Accepted: "accepted", upstream.Retry: "retry", upstream.Reject: "reject", 9: "invalid", -1: "invalid",
	} {
		if got := k.String(); got != want {
			t.Errorf("OutcomeKind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

func TestValidIdempotencyKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"k-1", true},
		{"urn:uuid:0e0a8a3c-6a8b-4a5e-9f7e-0c5d1c1f2b3a", true},
		{strings.Repeat("k", upstream.MaxIdempotencyKeyBytes), true},
		{strings.Repeat("k", upstream.MaxIdempotencyKeyBytes+1), false},
		{"", false},
		{"k\x00", false},
		{"k\r\nX-Injected: 1", false},
		{"k\x7f", false},
		{"clé", false},
		{"k 1", true},
		{"k ", false},
		{" k", false},
		{" ", false},
	} {
		if got := upstream.ValidIdempotencyKey(tc.key); got != tc.want {
			t.Errorf("ValidIdempotencyKey(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

// TestJoinMessagesCutsOnACharacter: a long join is cut on a character's boundary, never inside one.
func TestJoinMessagesCutsOnACharacter(t *testing.T) {
	got := upstream.JoinMessages([]string{strings.Repeat("a", 1023) + "ü and more"})
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || len(got) > 1024+len("…") {
		t.Fatalf("JoinMessages = …%q (%d bytes), want valid UTF-8 of at most 1024 bytes and the mark", got[len(got)-8:], len(got))
	}
}
