package testutil_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func TestLogs(t *testing.T) {
	var logs testutil.Logs
	log := slog.New(&logs)
	log.Debug("connected", "attempt", 1)
	log.With("component", "stream").Warn("disconnected", "reason", "eof")
	log.Warn("disconnected", "reason", "idle")

	if n := logs.Count(slog.LevelWarn, "disconnected"); n != 2 {
		t.Errorf("Count(warn, disconnected) = %d, want 2", n)
	}
	if n := logs.Count(slog.LevelInfo, "connected"); n != 0 {
		t.Errorf("Count(info, connected) = %d, want 0 (it was logged at debug)", n)
	}
	if v, ok := logs.Attr("disconnected", "reason"); !ok || v.String() != "eof" {
		t.Errorf(`Attr("disconnected", "reason") = %v, %v; want eof, true`, v, ok)
	}
	if _, ok := logs.Attr("connected", "reason"); ok {
		t.Error(`Attr("connected", "reason") found a value`)
	}
	want := "DEBUG connected attempt=1\nWARN disconnected component=stream reason=eof\nWARN disconnected reason=idle\n"
	if got := logs.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestBufferConcurrentWrites(t *testing.T) {
	var b testutil.Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				fmt.Fprintf(&b, "%d", i)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.String()); n != 400 {
		t.Errorf("%d bytes written, want 400", n)
	}
}
