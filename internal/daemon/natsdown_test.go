package daemon

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// TestNATSUnreachableAtStart: with no NATS server listening at start-up, the bridge logs the connection
// error (the server's URL without its credentials, "connection refused", component "nats") once however
// often it retries, and /readyz gives it as the nats check's reason. Once the server is there the bridge
// connects and gets ready, and every line it logged, up to its stop, names its component.
func TestNATSUnreachableAtStart(t *testing.T) {
	t.Parallel()
	const natsPassword = "nats-Pa55-unreachable"
	ns := testutil.StartNATS(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "bridge", Password: natsPassword}}
	})
	ns.Stop() // the port is closed: connection refused
	natsURL := strings.Replace(ns.URL(), "nats://", "nats://bridge:"+natsPassword+"@", 1)
	shownURL := strings.Replace(ns.URL(), "nats://", "nats://xxxxx@", 1)
	up := simtest.Start(t, false, sim.Options{EventRate: 20})
	ob := opsStartBridge(t, up.Config(natsURL, func(c *config.Config) { c.LogLevel = "info"; c.LogFormat = "json" }))

	const failed = "NATS connection failed; retrying"
	failures := func() []map[string]any {
		var out []map[string]any
		for _, r := range natsdownRecords(t, ob.logs.String()) {
			// The API service's and the units view's connections (nats-api, nats-units) log their own.
			if r["msg"] == failed && r["component"] != "nats-api" && r["component"] != "nats-units" {
				out = append(out, r)
			}
		}
		return out
	}
	testutil.EventuallyState(t, 10*time.Second, "the connection failure logged", func() (bool, string) {
		return len(failures()) > 0, ob.logs.String()
	})
	r := failures()[0]
	if r["component"] != "nats" || r["server"] != shownURL || !strings.Contains(r["err"].(string), "connection refused") {
		t.Errorf("failure line %v: want component nats, server %s, an err with \"connection refused\"", r, shownURL)
	}
	body := ob.waitReady(t, 5*time.Second, http.StatusServiceUnavailable,
		"nats: not ready: connection RECONNECTING to "+shownURL+": dial tcp", "connection refused")
	t.Logf("/readyz:\n%s", body)

	// The client retries every second or so; the reason stays the same, and so is logged only once.
	// Nothing to wait on but time: give it a few attempts.
	time.Sleep(3500 * time.Millisecond)
	if n := len(failures()); n != 1 {
		t.Errorf("%d lines %q, want 1 for a reason that repeats:\n%s", n, failed, ob.logs)
	}

	ns.Start()
	ob.waitReady(t, 20*time.Second, http.StatusOK, allReady...)
	if err := ob.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	logs := ob.logs.String()
	if strings.Contains(logs, natsPassword) {
		t.Error("the NATS password appears in the log")
	}
	for _, want := range []string{"NATS connected", "in-flight publishes completed"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	for _, r := range natsdownRecords(t, logs) {
		if c, _ := r["component"].(string); c == "" {
			t.Errorf("log line without component: %v", r)
		}
	}
	for line := range strings.Lines(logs) {
		if n := strings.Count(line, `"component":`); n > 1 {
			t.Errorf("log line with %d components (a logger that already had one given another): %s", n, line)
		}
	}
}

// natsdownRecords decodes the JSON log lines of logs.
func natsdownRecords(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		out = append(out, r)
	}
	return out
}
