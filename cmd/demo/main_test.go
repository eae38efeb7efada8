package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestDemoRuns runs the README's first command, 'go run ./cmd/demo', for a few seconds: events flow from the
// simulator through the bridge to the watcher, a report makes the round trip, it stops cleanly with exit
// code 0, and every log line names each attribute once (the bridge's parts add their own "component").
func TestDemoRuns(t *testing.T) {
	var stdout, stderr testutil.Buffer
	code := run(context.Background(), []string{"-duration", "5s", "-nats-port", "0", "-rate", "40",
		"-report-every", "1s", "-quiet"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	m := regexp.MustCompile(`(\d+) events received on NATS; (\d+) reports published, (\d+) came back as events`).
		FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary in the demo's output:\n%s", out)
	}
	events, _ := strconv.Atoi(m[1])
	sent, _ := strconv.Atoi(m[2])
	back, _ := strconv.Atoi(m[3])
	// 40 events/s for 5 s, less start-up; reports every second, less the last one's round trip.
	if events < 40 || sent < 2 || back < 1 || back > sent {
		t.Errorf("demo summary: %d events, %d reports sent, %d back; want events to flow and reports to return:\n%s",
			events, sent, back, out)
	}
	logs := stderr.String()
	if !strings.Contains(logs, "in-flight publishes completed") {
		t.Errorf("the demo did not stop the bridge cleanly:\n%s", logs)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		for _, key := range []string{"component", "process"} {
			if n := strings.Count(line, " "+key+"="); n > 1 {
				t.Errorf("log line names %q %d times: %s", key, n, line)
			}
		}
	}
}
