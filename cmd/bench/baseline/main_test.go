package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// TestMovesEventsExactlyOnce: against the simulator flooding more events than asked for, the baseline
// stores exactly the first n, each once under its SSE id, on the subject of its type, waits for their
// acknowledgements and says so in its RESULT line.
func TestMovesEventsExactlyOnce(t *testing.T) {
	const n = 3000
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{EventRate: -1, EventLimit: n + 500, EventSize: 300})
	o, err := parse([]string{"-url", up.Srv.URL + sim.DefaultBasePath + "/tracking/events/stream",
		"-n", "3000", "-nats", ns.URL(), "-token-url", up.Srv.URL + sim.TokenPath,
		"-user", "demo", "-pass", "demo", "-client-id", sim.DefaultClientID, "-window", "256"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, o, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "RESULT baseline events=3000 ") {
		t.Errorf("output %q, want a RESULT line for 3000 events", out.String())
	}

	nc := ns.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	msgs := testutil.StreamContents(t, js, streamName)
	if len(msgs) != n {
		t.Fatalf("stream %s holds %d messages, want %d", streamName, len(msgs), n)
	}
	for i, m := range msgs {
		want := sim.EventID(i + 1)
		if id := m.Header.Get(jetstream.MsgIDHeader); id != want {
			t.Fatalf("message %d has Nats-Msg-Id %q, want %q (each event once, in stream order)", i+1, id, want)
		}
		var ev struct{ Type string }
		if err := json.Unmarshal(m.Data, &ev); err != nil || m.Subject != subjectPrefix+ev.Type {
			t.Fatalf("message %d on %s with data type %q (%v)", i+1, m.Subject, ev.Type, err)
		}
	}
}

func TestParse(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-url", "http://127.0.0.1/stream", "-n", "0"},
		{"-url", "http://127.0.0.1/stream", "-window", "0"},
		{"-url", "http://127.0.0.1/stream", "extra"},
	} {
		if _, err := parse(args, &strings.Builder{}); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
}

func TestTypeToken(t *testing.T) {
	for name, want := range map[string]string{"GATE_IN": "GATE_IN", "": "UNKNOWN", "a.b*c >": "a_b_c__", "x-1": "x-1"} {
		if got := typeToken(name); got != want {
			t.Errorf("typeToken(%q) = %q, want %q", name, got, want)
		}
	}
}
