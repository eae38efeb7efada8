package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestDemoRuns runs the README's first command, 'go run ./cmd/demo', for a few seconds: events flow from the
// simulator through the bridge to the watcher, a report makes the round trip, the API answers a location
// search and an order created and read back, it stops cleanly with exit code 0, and every log line names each attribute once (the bridge's parts add their own "component").
// The banner gives the bridge's /status URL on the -http-addr, which answers while the demo runs.
func TestDemoRuns(t *testing.T) {
	var stdout, stderr testutil.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"-duration", "5s", "-nats-port", "0", "-rate", "40",
			"-report-every", "1s", "-quiet", "-http-addr", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	statusURL := regexp.MustCompile(`bridge +(http://127\.0\.0\.1:[1-9][0-9]*/status)`)
	testutil.Eventually(t, 5*time.Second, "the banner with the bridge's /status", func() bool {
		return statusURL.MatchString(stdout.String())
	})
	url := statusURL.FindStringSubmatch(stdout.String())[1]
	testutil.Eventually(t, 5*time.Second, "GET "+url+" answering ready", func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var doc struct{ Ready bool }
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&doc) == nil && doc.Ready
	})
	code := <-done
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
	for _, want := range []string{
		"  API   tracking.api.locations.search {\"type\":\"ADMINISTRATIVE_TERMINAL\",\"pageSize\":3}\n          L10001   Terminal Duisburg-Ruhrort\n",
		"  API   tracking.api.orders.create: created booking order BO-00000001 (pick-up at L10001)\n",
		"  API   tracking.api.orders.get {\"id\":\"BO-00000001\"}: PICK_UP at L10001, reference DEMO-PICKUP-1, unit FULL 22G1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
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

// TestDemoWhere: the demo follows the first units its events name and prints where each is now from the
// units view; while the view's bucket does not exist it prints nothing, and a unit the view lacks gets no
// line.
func TestDemoWhere(t *testing.T) {
	ns := testutil.StartNATS(t, nil)
	js, err := jetstream.New(ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	var out testutil.Buffer
	w := &watcher{out: &out, counts: map[string]int{}}
	for _, u := range []string{"_", "MSKU1234565", "", "MSKU1234565", "TGHU7654321", "CSQU3054383", "XXXU0000000"} {
		w.seeUnit(u)
	}
	if want := []string{"MSKU1234565", "TGHU7654321", "CSQU3054383"}; !slices.Equal(w.units, want) {
		t.Fatalf("followed units %q, want %q", w.units, want)
	}
	ctx := context.Background()
	w.where(ctx, js, "tracking")
	if out.String() != "" {
		t.Fatalf("printed without a units view: %q", out.String())
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "TRACKING_UNITS"})
	if err != nil {
		t.Fatal(err)
	}
	for unit, data := range map[string]string{
		"MSKU1234565": `{"id":"ev-7","type":"GATE_OUT","timestamp":"2026-11-28T09:15:00Z","observation":{"location":` +
			`{"id":"L10001","designation":"Terminal Duisburg-Ruhrort"},"observedLoadingUnit":{"loadingUnit":{"number":"MSKU1234565"}}}}`,
		"TGHU7654321": `{"id":"ev-9","type":"ARRIVED","timestamp":"2026-11-28T09:20:00Z"}`,
	} {
		if _, err := kv.Put(ctx, unit, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	w.where(ctx, js, "tracking")
	got := out.String()
	for _, want := range []string{
		"  WHERE now, from the units view TRACKING_UNITS:\n",
		"  WHERE MSKU1234565    GATE_OUT          at Terminal Duisburg-Ruhrort (L10001), 2026-11-28T09:15:00Z (event ev-7)\n",
		"  WHERE TGHU7654321    ARRIVED           at an unnamed place, 2026-11-28T09:20:00Z (event ev-9)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "CSQU3054383") {
		t.Errorf("a unit the view lacks is printed:\n%s", got)
	}
}
