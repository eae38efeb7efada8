package service

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestDropLoggedOncePerMinute: of a stream of requests dropped for one reason, one line a minute is
// logged, carrying the number of drops since the last line; every drop is counted.
func TestDropLoggedOncePerMinute(t *testing.T) {
	t.Parallel()
	logs := &testutil.Logs{}
	obs := &dropCounter{}
	s := New(nil, nil, Config{Prefix: "tracking", Logger: slog.New(logs), Observer: obs})
	var mu sync.Mutex
	now := time.Unix(0, 0)
	s.limit = logging.NewLimiter(time.Minute, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	ep := s.eps["orders-delete"]

	lines := func() []slog.Record {
		var out []slog.Record
		for _, r := range logs.Records() {
			if r.Level == slog.LevelWarn {
				out = append(out, r)
			}
		}
		return out
	}
	attr := func(r slog.Record, key string) string {
		var v string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v = a.Value.String()
			}
			return true
		})
		return v
	}

	for range 1000 {
		s.drop(s.Subject(ep.Name), RefusedNoReply, "")
	}
	s.drop(s.Subject(ep.Name), RefusedReplyNotInbox, "$KV.TRACKING_LEASES.events\x00"+string(make([]byte, 200)))
	mu.Lock()
	now = now.Add(59 * time.Second)
	mu.Unlock()
	s.drop(s.Subject(ep.Name), RefusedNoReply, "")
	if got := lines(); len(got) != 2 {
		t.Fatalf("%d lines within the minute, want 2 (one per reason):\n%s", len(got), logs)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	s.drop(s.Subject(ep.Name), RefusedNoReply, "")
	got := lines()
	if len(got) != 3 || attr(got[2], "reason") != RefusedNoReply || attr(got[2], "suppressed") != "1000" {
		t.Fatalf("after a minute: %d lines, want a third with suppressed=1000:\n%s", len(got), logs)
	}
	if r := attr(got[1], "reply"); r != "$KV.TRACKING_LEASES.events" {
		t.Errorf("reply quoted as %q: control characters must go", r)
	}
	if obs.n != 1003 {
		t.Errorf("counted %d drops, want 1003", obs.n)
	}
}

type dropCounter struct {
	mu sync.Mutex
	n  int
}

func (d *dropCounter) APIServed(string, int, time.Duration) {}

func (d *dropCounter) APIRefused(string) {
	d.mu.Lock()
	d.n++
	d.mu.Unlock()
}
