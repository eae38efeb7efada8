package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
)

// TestGateEvents runs the program against a whole bridge: it prints the gate events the upstream streams,
// and nothing of the other types, and exits 0 when stopped.
func TestGateEvents(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{})
	inject := func(id, typ string, number ...string) {
		unit := "MSCU1234565"
		if len(number) > 0 {
			unit = number[0]
		}
		b.Sim().Inject(bridgetest.User, id, typ, []byte(`{"id":"`+id+`","timestamp":"2026-11-25T08:30:00Z","type":"`+typ+`",`+
			`"observation":{"observedMeansOfTransport":{"modeOfTransport":"TRUCK","truck":{"licensePlate":"HH-EX 4711"}},`+
			`"observedLoadingUnit":{"loadingUnit":{"containerClass":"CONTAINER","number":"`+unit+`"}},`+
			`"location":{"designation":"Terminal Duisburg-Ruhrort"}}}`))
	}
	inject("ev-1", "GATE_IN")
	inject("ev-2", "ARRIVED")
	inject("ev-2b", "GATE_IN", "TGHU 765432-1")

	var stdout, stderr testutil.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-server", b.NATSURL, "-from-start", "-durable", "gates"}, &stdout, &stderr)
	}()
	inject("ev-3", "GATE_OUT")
	testutil.EventuallyState(t, 10*time.Second, "both gate events printed", func() (bool, string) {
		return strings.Contains(stdout.String(), "ev-3"), stdout.String()
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	want := []string{
		"waiting for GATE_IN and GATE_OUT on tracking.events.GATE_IN.* tracking.events.GATE_IN tracking.events.GATE_OUT.* tracking.events.GATE_OUT",
		"2026-11-25T08:30:00Z  GATE_IN   ev-1  unit MSCU1234565  truck HH-EX 4711  at Terminal Duisburg-Ruhrort",
		"2026-11-25T08:30:00Z  GATE_IN   ev-2b  unit TGHU 765432-1  truck HH-EX 4711  at Terminal Duisburg-Ruhrort",
		"2026-11-25T08:30:00Z  GATE_OUT  ev-3  unit MSCU1234565  truck HH-EX 4711  at Terminal Duisburg-Ruhrort",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", stdout.String(), strings.Join(want, "\n"))
	}

	// One container: only its gate events, by subject.
	stdout = testutil.Buffer{}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- run(ctx, []string{"-server", b.NATSURL, "-from-start", "-unit", "tghu7654321"}, &stdout, &stderr)
	}()
	inject("ev-4", "GATE_OUT", "TGHU7654321")
	testutil.EventuallyState(t, 10*time.Second, "the unit's gate events printed", func() (bool, string) {
		return strings.Contains(stdout.String(), "ev-4"), stdout.String()
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	want = []string{
		"waiting for GATE_IN and GATE_OUT on tracking.events.GATE_IN.TGHU7654321 tracking.events.GATE_OUT.TGHU7654321",
		"2026-11-25T08:30:00Z  GATE_IN   ev-2b  unit TGHU 765432-1  truck HH-EX 4711  at Terminal Duisburg-Ruhrort",
		"2026-11-25T08:30:00Z  GATE_OUT  ev-4  unit TGHU7654321  truck HH-EX 4711  at Terminal Duisburg-Ruhrort",
	}
	if got := strings.TrimSpace(stdout.String()); got != strings.Join(want, "\n") {
		t.Errorf("output for one unit:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if code := run(context.Background(), []string{"-nope"}, &stdout, &stderr); code != 2 {
		t.Errorf("a bad flag: exit code %d", code)
	}
}
