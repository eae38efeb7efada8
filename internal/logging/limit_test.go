package logging

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// TestLimiter: one line per key per interval, the next one carrying the count held back.
func TestLimiter(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	l := NewLimiter(time.Minute, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	if ok, n := l.Allow("a"); !ok || n != 0 {
		t.Fatalf("first a: %v %d", ok, n)
	}
	for range 5 {
		if ok, _ := l.Allow("a"); ok {
			t.Fatal("a let through twice within the interval")
		}
	}
	if ok, n := l.Allow("b"); !ok || n != 0 {
		t.Fatalf("first b (another key): %v %d", ok, n)
	}
	advance(59 * time.Second)
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("a let through after 59s")
	}
	advance(time.Second)
	if ok, n := l.Allow("a"); !ok || n != 6 {
		t.Fatalf("a after a minute: %v, suppressed %d, want true 6", ok, n)
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("a let through twice in the second interval")
	}
	advance(time.Hour)
	if ok, n := l.Allow("a"); !ok || n != 1 {
		t.Fatalf("a an hour later: %v %d, want true 1", ok, n)
	}
}

func TestValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"tab\there\r\nnul\x00", "tabherenul"},
		{"bidi\u202etxt\u200b", "biditxt"},
		{"bad\xffutf8", "bad\ufffdutf8"},
		{strings.Repeat("x", 20), strings.Repeat("x", 10) + "…"},
		{strings.Repeat("é", 20), strings.Repeat("é", 5) + "…"}, // 10 bytes: five two-byte runes
		{"é" + strings.Repeat("é", 20), strings.Repeat("é", 5) + "…"},
		{strings.Repeat("\x01", 100) + "ok", "ok"},
		{"ab" + strings.Repeat("\x01", 100), "ab"},
	} {
		if got := Value(tc.in, 10); got != tc.want {
			t.Errorf("Value(%q, 10) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := Value(strings.Repeat("x", 1<<20), 64); len(got) != 64+len("…") {
		t.Errorf("a megabyte cut to %d bytes", len(got))
	}
}

// TestCut: at most n bytes on a rune boundary, "…" marking a cut; the bytes themselves are kept.
func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 0, ""},
		{"short", 5, "short"},
		{"longer", 5, "longe…"},
		{"tab\t\xff", 5, "tab\t\xff"},
		{strings.Repeat("é", 3), 5, "éé…"}, // byte 5 is inside the third é
		{"aé", 1, "a…"},                    // the cut falls before a two-byte rune
		{"€uro", 2, "…"},                   // inside the first rune: nothing of it is kept
		{strings.Repeat("x", 1<<20), 64, strings.Repeat("x", 64) + "…"},
	} {
		if got := Cut(tc.in, tc.n); got != tc.want {
			t.Errorf("Cut(%.20q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestNewBoundsValues: a log line never carries a string or error value longer than MaxAttrBytes,
// whatever its source; short values pass unchanged.
func TestNewBoundsValues(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		log := New(&buf, format, slog.LevelInfo)
		huge := strings.Repeat("x", 1<<20)
		log.Info("m", "event_id", huge, "err", errors.New("quoting "+huge), "short", "ok")
		line := buf.String()
		if len(line) > 3*MaxAttrBytes || !strings.Contains(line, "(1048576 bytes)") || !strings.Contains(line, "ok") {
			t.Errorf("%s: line of %d bytes: %.300s", format, len(line), line)
		}
	}
}

// TestClip: the mark counts within the bound, and the cut falls between characters.
func TestClip(t *testing.T) {
	for _, s := range []string{"short", strings.Repeat("ö", 100), strings.Repeat("x", 100), "€€€€€€€€€€"} {
		got := Clip(s, 11)
		if len(got) > 11 || !utf8.ValidString(got) {
			t.Errorf("Clip(%q, 11) = %q (%d bytes)", s, got, len(got))
		}
		if len(s) <= 11 && got != s {
			t.Errorf("clip changed a short value: %q", got)
		}
	}
}
