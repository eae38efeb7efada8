package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
)

// TestReportEvent runs the program against a whole bridge: examples/report.json through JetStream (and
// again, as a duplicate), a report built from flags through the API, and refusals.
func TestReportEvent(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{})
	file, err := os.ReadFile("../report.json")
	if err != nil {
		t.Fatal(err)
	}
	exec := func(stdin string, args ...string) (int, string, string) {
		var stdout, stderr testutil.Buffer
		code := run(context.Background(), append([]string{"-server", b.NATSURL}, args...), strings.NewReader(stdin), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, errs := exec("", "-file", "../report.json", "-key", "scanner7-000042")
	if code != 0 || out != "stored: TRACKING_REPORTS #1 (Nats-Msg-Id scanner7-000042); the bridge sends it upstream\n" {
		t.Fatalf("exit %d: %q %q", code, out, errs)
	}
	testutil.EventuallyState(t, 10*time.Second, "the report upstream", func() (bool, string) {
		rs := b.Sim().Reports(bridgetest.User)
		return len(rs) == 1 && rs[0].IdempotencyKey == "scanner7-000042" && string(rs[0].Body) == string(file), ""
	})
	code, out, _ = exec(string(file), "-file", "-", "-key", "scanner7-000042")
	if code != 0 || !strings.HasPrefix(out, "already stored: TRACKING_REPORTS #1") {
		t.Errorf("the same key again: exit %d, %q", code, out)
	}

	code, out, errs = exec("", "-order", "TO03804118", "-position", "10", "-type", "GATE_OUT", "-plate", "HH-EX 4711",
		"-time", "2026-11-25T09:00:00Z", "-sync", "-key", "k-sync")
	if code != 0 || out != "accepted upstream\n" {
		t.Fatalf("-sync: exit %d: %q %q", code, out, errs)
	}
	rs := b.Sim().Reports(bridgetest.User)
	if last := rs[len(rs)-1]; last.IdempotencyKey != "k-sync" || !strings.Contains(string(last.Body), `"licensePlate":"HH-EX 4711"`) ||
		!strings.Contains(string(last.Body), `"timestamp":"2026-11-25T09:00:00Z"`) {
		t.Errorf("the -sync report upstream: %+v", last)
	}

	for _, tc := range []struct {
		args  []string
		stdin string
		code  int
		want  string
	}{
		{[]string{"-type", "GATE_IN"}, "", 2, "give -file, or -order and -position"},
		{[]string{"-file", "-"}, `{"event":{"type":"GATE_IN"}}`, 1, "event.timestamp is missing"},
		{[]string{"-file", "-", "-sync"}, `{"event":{"type":"GATE_IN"}}`, 1, "event.timestamp is missing"},
		{[]string{"-file", "-", "-sync"}, `{"order":{"orderId":"TO-NOT-MINE","positionId":"1"},"event":{"type":"GATE_IN","timestamp":"2026-11-25T09:00:00Z"}}`, 1, "404"},
		{[]string{"-file", "no-such-file.json"}, "", 1, "no-such-file.json"},
	} {
		code, _, errs := exec(tc.stdin, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, %q; want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
}
