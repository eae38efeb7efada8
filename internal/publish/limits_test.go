package publish

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// setMaxMsgSize sets a stream's max_msg_size, as an operator would on a stream they manage.
func (e *testEnv) setMaxMsgSize(stream string, max int32) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = max
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		e.t.Fatal(err)
	}
}

// TestStreamMaxMsgSize: streams whose max_msg_size is below what the server's max_payload allows, set
// before the publisher starts or while it runs. An event too large for the events stream, and a dead
// letter too large for the dead-letter stream, are dead-lettered as descriptions that fit, and the
// events behind them go on: JetStream's refusal does not stop the stream.
func TestStreamMaxMsgSize(t *testing.T) {
	t.Parallel()
	const eventsMax, dlqMax = 2048, 1024
	for _, whenSet := range []string{"before start", "while running"} {
		t.Run(whenSet, func(t *testing.T) {
			e := newEnv(t, time.Minute)
			if whenSet == "before start" {
				e.setMaxMsgSize(e.layout.Events(), eventsMax)
				e.setMaxMsgSize(e.layout.DLQ(), dlqMax)
			}
			p := e.publisher(8, nil)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
			defer cancel()
			if _, err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			if got := handleAll(ctx, t, p, ev("ok-1", "GATE_IN")); got != "ok-1" {
				t.Fatalf("Resume = %q", got)
			}
			if whenSet == "while running" {
				e.setMaxMsgSize(e.layout.Events(), eventsMax)
				e.setMaxMsgSize(e.layout.DLQ(), dlqMax)
			}
			big := upstream.Event{ID: "big-2", ResumeID: "big-2",
				Data: []byte(`{"type":"GATE_IN","pad":"` + strings.Repeat("z", 3000) + `"}`)}
			notJSON := upstream.Event{ID: "raw-3", ResumeID: "raw-3", Data: []byte(strings.Repeat("x", 1500))}
			done := make(chan string, 1)
			go func() {
				defer close(done)
				for _, x := range []upstream.Event{big, notJSON, ev("ok-4", "GATE_OUT")} {
					if err := p.Handle(ctx, x); err != nil {
						return
					}
				}
				if last, err := p.Resume(ctx); err == nil {
					done <- last
				}
			}()
			if last := <-done; last != "ok-4" {
				t.Fatalf("Resume = %q: the stream stopped behind a message JetStream refused as too large", last)
			}

			events := e.messages(e.layout.Events())
			if len(events) != 2 || events[1].Header.Get(HeaderMsgID) != "ok-4" {
				t.Fatalf("events stream holds %d messages, want ok-1 and ok-4", len(events))
			}
			dlq := e.deadLetters(2, dlqMax)
			if id := dlq[0].Header.Get(HeaderMsgID); id != "big-2" {
				t.Errorf("dead letter 0 has id %q", id)
			}
			var d struct {
				Error string
				Size  int
			}
			if err := json.Unmarshal(dlq[0].Data, &d); err != nil || d.Size != len(big.Data) ||
				!strings.Contains(d.Error, "max_msg_size") {
				t.Errorf("dead letter 0 = %s (%v)", dlq[0].Data, err)
			}
			if got := dlq[0].Header.Get(layout.HeaderError); !strings.Contains(got, "max_msg_size") {
				t.Errorf("Bridge-Error = %q", got)
			}
			if id := dlq[1].Header.Get(HeaderMsgID); id != "raw-3" || !strings.Contains(string(dlq[1].Data), "data_prefix") {
				t.Errorf("dead letter 1: id %q, data %.300s", id, dlq[1].Data)
			}

			// A restart resumes after what was settled when ok-4 went out: ok-1 while the two before it were
			// in flight, big-2 or raw-3 when their dead letters were stored first (timing decides; a dead
			// letter known too large at once is settled at once). The replay stores nothing twice.
			p2 := e.publisher(8, nil)
			if got, err := p2.Resume(ctx); err != nil || got != "ok-1" && got != "big-2" && got != "raw-3" {
				t.Fatalf("after a restart Resume = %q, %v; want ok-1, big-2 or raw-3", got, err)
			}
			if got := handleAll(ctx, t, p2, big, notJSON, ev("ok-4", "GATE_OUT"), ev("ok-5", "GATE_IN")); got != "ok-5" {
				t.Fatalf("after a restart Resume = %q", got)
			}
			if n := len(e.messages(e.layout.Events())); n != 3 {
				t.Errorf("events stream holds %d messages after the replay, want 3", n)
			}
			if n := len(e.messages(e.layout.DLQ())); n != 2 {
				t.Errorf("%d dead letters after the replay, want 2", n)
			}
		})
	}
}
