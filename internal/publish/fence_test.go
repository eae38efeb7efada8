package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// fencedPublisher returns a publisher on nc fenced on the layout's fence subject.
func fencedPublisher(t *testing.T, nc *nats.Conn, layout layout.Streams, window int) *Publisher {
	t.Helper()
	p, err := New(nc, Config{Prefix: layout.Prefix, EventsStream: layout.Events(), DLQStream: layout.DLQ(),
		FenceSubject: layout.FenceSubject(), Window: window, Timeout: 5 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// fenceBackend starts one server ("server") or a 3-node cluster ("cluster", streams of 3 replicas) and the
// streams on it, with the given duplicate window; it returns a way to connect, the layout, a JetStream
// context and a context for the test's requests.
func fenceBackend(t *testing.T, backend string, dupWindow time.Duration) (func() *nats.Conn, layout.Streams, jetstream.JetStream, context.Context) {
	t.Helper()
	var connect func() *nats.Conn
	layout := layout.Streams{Prefix: "tracking", DuplicateWindow: dupWindow, Replicas: 1}
	if backend == "cluster" {
		connect = testutil.StartCluster(t).Connect
		layout.Replicas = 3
	} else {
		connect = testutil.StartNATS(t, nil).Connect
	}
	js, _ := jetstream.New(connect())
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(120*time.Second))
	t.Cleanup(cancel)
	if err := layout.Ensure(ctx, js, true, discard()); err != nil {
		t.Fatal(err)
	}
	return connect, layout, js, ctx
}

// TestFenceRefusesFormerLeader plays two leaders in turn, on one server and on an R3 stream of a 3-node
// cluster: once the second claimed the fence, every event of the first is refused by JetStream (ErrFenced),
// whatever the duplicate window, and the second resumes after what the first stored. Every event stored
// carries the check of the marker stored before it.
func TestFenceRefusesFormerLeader(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"server", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			connect, layout, js, ctx := fenceBackend(t, backend, 100*time.Millisecond)
			nc := connect()

			first := fencedPublisher(t, nc, layout, 64)
			if err := first.Claim(ctx, "first", []byte(`{"name":"first"}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := first.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				if err := first.Handle(ctx, ev(fmt.Sprintf("e-%03d", i), "GATE_IN")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := first.Resume(ctx); err != nil {
				t.Fatal(err)
			}

			// The second leader claims on a connection of its own; the first goes on as if nothing happened.
			second := fencedPublisher(t, connect(), layout, 64)
			if err := second.Claim(ctx, "second", []byte(`{"name":"second"}`)); err != nil {
				t.Fatal(err)
			}
			after, err := second.Resume(ctx)
			// The cursor may lag the last stored event by the window (the rest is on the skip list): the
			// upstream replays from it, and the replay of what is stored is not sent again.
			from := -1
			if err != nil {
				t.Fatal(err)
			}
			if after != "" {
				if _, serr := fmt.Sscanf(after, "e-%03d", &from); serr != nil || from > 49 {
					t.Fatalf("second leader resumes after %q, want an id up to e-049", after)
				}
			}
			time.Sleep(200 * time.Millisecond) // past the duplicate window: only the fence can refuse now
			var fenced error
			for i := 50; i < 60 && fenced == nil; i++ {
				fenced = first.Handle(ctx, ev(fmt.Sprintf("e-%03d", i), "GATE_IN"))
			}
			if fenced == nil {
				_, fenced = first.Resume(ctx)
			}
			if !errors.Is(fenced, ErrFenced) {
				t.Fatalf("former leader's publish: %v, want ErrFenced", fenced)
			}
			for i := from + 1; i < 55; i++ { // the upstream's replay after the cursor, then new events
				if err := second.Handle(ctx, ev(fmt.Sprintf("e-%03d", i), "GATE_IN")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := second.Resume(ctx); err != nil {
				t.Fatal(err)
			}

			events := testutil.StreamContents(t, js, layout.Events())
			if len(events) != 55 {
				t.Errorf("%d events stored, want 55", len(events))
			}
			for i, m := range events {
				if want := fmt.Sprintf("e-%03d", i); i < len(events) && m.Header.Get(HeaderMsgID) != want {
					t.Errorf("event %d is %s, want %s", i, m.Header.Get(HeaderMsgID), want)
				}
			}
			checkFenceOrder(t, js, layout)
		})
	}
}

// checkFenceOrder reads the events stream with its markers and checks that every event was stored under
// a marker of the last leader before it, and that each fence subject holds only its latest marker (the
// markers' rollup): an event checks a marker stored before it, and if a newer marker has since replaced
// that one on its subject (and the rollup removed it), the event was stored before the newer marker. So no
// event of a former leader got in after a new leader's marker on the subject it checked.
func checkFenceOrder(t *testing.T, js jetstream.JetStream, layout layout.Streams) {
	t.Helper()
	latest := map[string]uint64{} // fence subject → its marker's sequence
	present := map[uint64]bool{}
	var events []*jetstream.RawStreamMsg
	piled := 0 // markers behind a later one on their subject
	// Read in batches: asking for each sequence alone took longer than a minute on a busy machine.
	for _, m := range testutil.StreamAll(t, js, layout.Events()) {
		present[m.Sequence] = true
		switch {
		case m.Subject == restartSubject(layout.FenceSubject()):
		case isFence(layout.FenceSubject(), m.Subject):
			if prev, ok := latest[m.Subject]; ok {
				if piled++; piled <= 3 {
					t.Errorf("fence subject %s holds markers at %d and %d: no rollup", m.Subject, prev, m.Sequence)
				}
			}
			latest[m.Subject] = m.Sequence
		default:
			events = append(events, m)
		}
	}
	for _, m := range events {
		subject := m.Header.Get(jetstream.ExpectedLastSubjSeqSubjHeader)
		got, _ := strconv.ParseUint(m.Header.Get(jetstream.ExpectedLastSubjSeqHeader), 10, 64)
		last := latest[subject]
		switch {
		case got == 0 || last == 0 || got >= m.Sequence:
			t.Errorf("event at %d checks marker %d on %q, whose marker is at %d", m.Sequence, got, subject, last)
		case got != last && (m.Sequence > last || present[got]):
			t.Errorf("event at %d checks marker %d on %q, but the marker there since %d is newer (and %d is still stored: %v)",
				m.Sequence, got, subject, last, got, present[got])
		}
	}
	if piled > 0 {
		t.Errorf("%d markers are stored behind a later one on their subject", piled)
	}
	if len(latest) != FenceWidth {
		t.Errorf("%d fence subjects hold a marker, want %d", len(latest), FenceWidth)
	}
}

// TestFenceMarkersBounded: however often the leader changes, the events stream holds one marker per fence
// subject and one restart directive (each a rollup of the one before), and every former leader is still
// fenced out: five leaders in turn, an operator's restart between two of them, on one server and on an
// R3 stream.
func TestFenceMarkersBounded(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"server", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			connect, layout, js, ctx := fenceBackend(t, backend, time.Minute)
			const leaders, perTerm = 5, 10
			var prev *Publisher
			for k := range leaders {
				p := fencedPublisher(t, connect(), layout, 64)
				if err := p.Claim(ctx, fmt.Sprintf("leader-%d", k), nil); err != nil {
					t.Fatal(err)
				}
				if prev != nil {
					err := prev.Handle(ctx, ev(fmt.Sprintf("stale-%d", k), "GATE_IN"))
					if err == nil {
						_, err = prev.Resume(ctx)
					}
					if !errors.Is(err, ErrFenced) {
						t.Fatalf("leader %d after leader %d claimed: %v, want ErrFenced", k-1, k, err)
					}
				}
				if _, err := p.Resume(ctx); err != nil {
					t.Fatal(err)
				}
				for i := k * perTerm; i < (k+1)*perTerm; i++ {
					if err := p.Handle(ctx, ev(fmt.Sprintf("e-%03d", i), "GATE_IN")); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := p.Resume(ctx); err != nil {
					t.Fatal(err)
				}
				if k == 2 { // the operator restarts the stream after the last event: the next leader takes it
					if _, _, err := storeRestart(ctx, js, layout.Events(), layout.FenceSubject(),
						fmt.Sprintf("e-%03d", (k+1)*perTerm-1), false); err != nil {
						t.Fatal(err)
					}
				}
				prev = p
			}

			s, err := js.Stream(ctx, layout.Events())
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(layout.FenceSubject()+".>"))
			if err != nil {
				t.Fatal(err)
			}
			var markers uint64
			for subject, n := range info.State.Subjects {
				markers += n
				if n != 1 {
					t.Errorf("%s holds %d messages, want 1", subject, n)
				}
			}
			t.Logf("%s: after %d leaders and a restart the stream holds %d messages on %s.>, %d in all",
				backend, leaders, markers, layout.FenceSubject(), info.State.Msgs)
			if markers != FenceWidth+1 {
				t.Errorf("%d messages on %s.>, want %d markers and the directive", markers, layout.FenceSubject(), FenceWidth)
			}
			if n := testutil.StreamMsgs(t, js, layout.Events()); n != leaders*perTerm {
				t.Errorf("%d events stored, want %d", n, leaders*perTerm)
			}
			checkFenceOrder(t, js, layout)
		})
	}
}

// TestRestartDirective: a restart marker newer than every event makes the next leader resume after its
// id (or from the beginning), with nothing to skip; once an event is stored after it, it no longer applies.
func TestRestartDirective(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 100*time.Millisecond)
	ctx := context.Background()
	lead := e.lead
	p, _ := lead("a")
	for i := range 10 {
		if err := p.Handle(ctx, ev(fmt.Sprintf("e-%02d", i), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}

	if _, _, err := storeRestart(ctx, e.js, e.layout.Events(), e.layout.FenceSubject(), "e-03", false); err != nil {
		t.Fatal(err)
	}
	// Another client's messages after the directive (acknowledgements aimed at the subject) hide nothing.
	for i := range 3 {
		foreignAck(t, e.js, restartSubject(e.layout.FenceSubject()), i)
	}
	if err := p.Handle(ctx, ev("e-10", "GATE_IN")); err == nil {
		_, err = p.Resume(ctx)
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("leader in office after the restart marker: %v, want ErrFenced", err)
		}
	}
	p, after := lead("b")
	if after != "e-03" || len(p.cursor.skip) > 0 {
		t.Fatalf("next leader resumes after %q, want e-03", after)
	}
	for i := 4; i < 12; i++ { // the upstream's replay after e-03: stored again (beyond the window)
		if err := p.Handle(ctx, ev(fmt.Sprintf("e-%02d", i), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	c, after := lead("c")
	if _, skips := c.cursor.skip["e-11"]; !skips {
		t.Errorf("a leader after the replay resumes after %q without skipping e-11: the directive still applies", after)
	}

	if _, _, err := storeRestart(ctx, e.js, e.layout.Events(), e.layout.FenceSubject(), "", true); err != nil {
		t.Fatal(err)
	}
	if d, after := lead("d"); after != "" || len(d.cursor.skip) > 0 {
		t.Errorf("after a restart from the beginning the leader resumes after %q, want \"\"", after)
	}
	// A directive whose replay stores nothing (all within the duplicate window here: none) is taken once.
	if e, after := lead("e"); after == "" || len(e.cursor.skip) == 0 {
		t.Errorf("the next leader resumes after %q skipping %d: the directive from the beginning was taken twice", after, len(e.cursor.skip))
	}
	if _, _, err := storeRestart(ctx, e.js, e.layout.Events(), e.layout.FenceSubject(), "", false); err == nil {
		t.Error("a restart without an id nor the beginning was accepted")
	}
	if _, _, err := storeRestart(ctx, e.js, e.layout.Events(), e.layout.FenceSubject(), " x", false); err == nil {
		t.Error("a restart after an id HTTP cannot send back was accepted")
	}
}

// testLogger logs to the test's output with -v, else nowhere.
func testLogger(t *testing.T) *slog.Logger {
	if !testing.Verbose() {
		return discard()
	}
	return slog.Default().With("test", t.Name())
}

// TestSettleReadsNoCursor: a publisher stopped before its first Resume settles at once, without reading
// the events stream (here missing, where Resume fails), so that a stopping leader releases the lease
// without delay.
func TestSettleReadsNoCursor(t *testing.T) {
	t.Parallel()
	nc := testutil.StartNATS(t, nil).Connect()
	p, err := New(nc, Config{Prefix: "tracking", EventsStream: "MISSING", DLQStream: "MISSING_DLQ", Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Settle(ctx); err != nil {
		t.Errorf("Settle before any Resume: %v", err)
	}
	if _, err := p.Resume(ctx); err == nil {
		t.Error("Resume without the events stream succeeded; the test proves nothing")
	}
}

// isFence reports whether subject is one of the fence subjects under base (markers and directives).
func isFence(base, subject string) bool {
	return base != "" && len(subject) > len(base) && subject[len(base)] == '.' && strings.HasPrefix(subject, base)
}

// TestFenceOutlivesStreamLimits: in an events stream that discards its oldest messages, by size or by
// age, a leader's markers would be removed in a long term, and every later event refused as if another
// leader had taken over; Run stores them again in time, and the leader publishes on.
//
// Run looks every second and renews past half the max_age, so a max_age of 4 s leaves the renewal at
// least a second before the markers expire (2 s left less than one, which a machine busy with other
// tests took from it now and then).
func TestFenceOutlivesStreamLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limits layout.Limits
		run    time.Duration // the stream turns over twice
	}{
		{"max_bytes", layout.Limits{MaxBytes: 600_000}, 6 * time.Second},
		{"max_age", layout.Limits{MaxAge: 4 * time.Second}, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			layout := layout.Streams{Prefix: "tracking", DuplicateWindow: 100 * time.Millisecond, EventsLimits: tc.limits}
			nc := testutil.StartNATS(t, nil).Connect()
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
			defer cancel()
			if err := layout.Ensure(ctx, js, true, discard()); err != nil {
				t.Fatal(err)
			}
			p := fencedPublisher(t, nc, layout, 64)
			if err := p.Claim(ctx, "long-term", []byte(`{"name":"long-term"}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			ran := make(chan struct{})
			go func() { defer close(ran); _ = p.Run(rctx) }()
			defer func() { stop(); <-ran }()

			// About 250 events a second of ~700 bytes: the stream of 600 kB turns over twice in 6 s, and
			// 4 s of max_age twice in 8 s.
			first := p.fence.seqs[0]
			end := time.Now().Add(tc.run)
			for i := 0; time.Now().Before(end); i++ {
				if err := p.Handle(ctx, ev(fmt.Sprintf("e-%05d", i), "GATE_IN")); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if i%50 == 49 {
					if _, err := p.Resume(ctx); err != nil {
						t.Fatalf("after event %d: %v", i, err)
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
			if _, err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			if p.fence.seqs[0] == first {
				t.Error("the markers were never stored again")
			}
			s, err := js.Stream(ctx, layout.Events())
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(layout.FenceSubject()+".>"))
			if err != nil {
				t.Fatal(err)
			}
			if len(info.State.Subjects) != FenceWidth {
				t.Errorf("%d fence subjects hold a marker, want %d", len(info.State.Subjects), FenceWidth)
			}
			t.Logf("the stream holds %d messages (%d bytes) from %d to %d", info.State.Msgs, info.State.Bytes,
				info.State.FirstSeq, info.State.LastSeq)
		})
	}
}
