package publish

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
	"go.opentelemetry.io/otel/trace"
)

// testEnv is an embedded nats-server with the bridge's streams and a client connection.
type testEnv struct {
	t      *testing.T
	ns     *testutil.NATS
	nc     *nats.Conn
	js     jetstream.JetStream
	layout layout.Streams
}

func newEnv(t *testing.T, dup time.Duration) *testEnv {
	t.Helper()
	return newEnvWith(t, dup, nil)
}

// newEnvWith is newEnv with the server's options adjusted by configure.
func newEnvWith(t *testing.T, dup time.Duration, configure func(*server.Options)) *testEnv {
	t.Helper()
	e := &testEnv{t: t, ns: testutil.StartNATS(t, configure), layout: layout.Streams{Prefix: "tracking", DuplicateWindow: dup}}
	e.nc = e.ns.Connect()
	e.js, _ = jetstream.New(e.nc)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	if err := e.layout.Ensure(ctx, e.js, true, discard()); err != nil {
		t.Fatal(err)
	}
	return e
}

// publisher returns a publisher over the environment's connection; obs may be nil.
func (e *testEnv) publisher(window int, obs Observer) *Publisher {
	e.t.Helper()
	p, err := New(e.nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), DLQStream: e.layout.DLQ(), Window: window,
		Timeout: 2 * time.Second, Source: "https://upstream.test/v1.0/tracking/events/stream", Logger: discard(),
		Observer: obs})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.Close)
	return p
}

// messages returns every message stored in a stream, in order.
func (e *testEnv) messages(stream string) []*jetstream.RawStreamMsg {
	e.t.Helper()
	return testutil.StreamContents(e.t, e.js, stream)
}

func ev(id, typ string) upstream.Event {
	return upstream.Event{ID: id, ResumeID: id, Name: typ,
		Data: []byte(fmt.Sprintf(`{"id":%q,"timestamp":"2026-11-22T10:00:00Z","type":%q,"observation":{"type":"nested"}}`, id, typ))}
}

func TestPublishSubjectsAndHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	p := e.publisher(16, nil)
	ctx := context.Background()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	types := []string{"GATE_OUT", "GATE_IN", "ARRIVED", "DEPARTED", "HANDLING_STARTED", "HANDLING_FINISHED",
		"UNKNOWN", "LOADED_ON_BARGE", "a.b", "*", ">", "GATE IN", "X\r\nY", ""}
	for i, typ := range types {
		if err := p.Handle(ctx, ev(fmt.Sprintf("ev-%d", i), typ)); err != nil {
			t.Fatal(err)
		}
	}
	// Missing type, non-string type, no SSE id (the data's id is used), and no id at all (digest).
	extra := []upstream.Event{
		{ResumeID: "ev-13", Data: []byte(`{"id":"data-id","timestamp":"2026-11-22t10:00:00.5z"}`)},
		{ID: "ev-15", ResumeID: "ev-15", Data: []byte(`{"type":42,"timestamp":"not a time"}`)},
		{ResumeID: "ev-15", Data: []byte(`{"type":"GATE_IN"}`)},
	}
	for _, x := range extra {
		if err := p.Handle(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if last, err := p.Resume(ctx); err != nil || last != "ev-15" {
		t.Fatalf("Resume = %q, %v", last, err)
	}

	msgs := e.messages(e.layout.Events())
	wantSubjects := []string{"GATE_OUT", "GATE_IN", "ARRIVED", "DEPARTED", "HANDLING_STARTED", "HANDLING_FINISHED",
		"UNKNOWN", "LOADED_ON_BARGE", "a_b", "_", "_", "GATE_IN", "X__Y", "UNKNOWN", "UNKNOWN", "UNKNOWN", "GATE_IN"}
	if len(msgs) != len(wantSubjects) {
		t.Fatalf("stored %d messages, want %d", len(msgs), len(wantSubjects))
	}
	for i, m := range msgs {
		// None of these events names a unit; ce-type names the type alone.
		typeSubject := "tracking.events." + wantSubjects[i]
		if want := typeSubject + "._"; m.Subject != want {
			t.Errorf("message %d on %q, want %q", i, m.Subject, want)
		}
		if m.Header.Get("Content-Type") != "application/json" || m.Header.Get("ce-specversion") != "1.0" ||
			m.Header.Get("ce-source") == "" || m.Header.Get("ce-type") != typeSubject {
			t.Errorf("message %d headers %v", i, m.Header)
		}
		if id := m.Header.Get(HeaderMsgID); id == "" || id != m.Header.Get(HeaderEventID) || id != m.Header.Get("ce-id") {
			t.Errorf("message %d ids %v", i, m.Header)
		}
	}
	if got := msgs[0].Header.Get("ce-time"); got != "2026-11-22T10:00:00Z" {
		t.Errorf("ce-time = %q", got)
	}
	// RFC 3339 allows lower-case t and z; ce-time carries the upper-case form every parser takes.
	if got := msgs[14].Header.Get("ce-time"); got != "2026-11-22T10:00:00.5Z" {
		t.Errorf("ce-time of a lower-case timestamp = %q", got)
	}
	if got := msgs[12].Header.Get(HeaderEventType); got != "XY" {
		t.Errorf("Tracking-Event-Type with CR/LF = %q, want control characters removed", got)
	}
	if got := msgs[14].Header.Get(HeaderMsgID); got != "data-id" {
		t.Errorf("id without SSE id = %q, want the data's id", got)
	}
	if _, ok := msgs[15].Header[HeaderEventType]; ok || msgs[15].Header.Get("ce-time") != "" {
		t.Errorf("non-string type / bad time headers: %v", msgs[15].Header)
	}
	if got := msgs[16].Header.Get(HeaderMsgID); len(got) != len("sha256:")+64 || got[:7] != "sha256:" {
		t.Errorf("id without any id = %q, want a sha256 digest", got)
	}
	if string(msgs[7].Data) != string(ev("ev-7", "LOADED_ON_BARGE").Data) {
		t.Errorf("body not verbatim: %s", msgs[7].Data)
	}
}

func TestPublishDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	p := e.publisher(8, nil)
	ctx := context.Background()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for _, x := range []upstream.Event{
		{ID: "bad-1", ResumeID: "bad-1", Data: []byte("not json")},
		{ID: "bad-2", ResumeID: "bad-2", Data: []byte(`["an array"]`)},
		{ID: "big-3", ResumeID: "big-3", Oversize: 5 << 20},
		{ID: "long-4", ResumeID: "long-4", Oversize: 9000, ManyLines: true},
		{ID: "empty", ResumeID: "empty", Name: "GATE_IN"}, // a data: line without a value
		{ID: "slow-6", ResumeID: "slow-6", Oversize: 70, Slow: time.Minute},
		ev("ok-5", "GATE_IN"),
	} {
		if err := p.Handle(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if last, err := p.Resume(ctx); err != nil || last != "ok-5" {
		t.Fatalf("Resume = %q, %v", last, err)
	}
	dlq := e.messages(e.layout.DLQ())
	if len(dlq) != 6 {
		t.Fatalf("dead letters = %d, want 6", len(dlq))
	}
	for i, want := range []string{"not a JSON object", "not a JSON object", "exceeds the size bound",
		"more than 1000 lines exceeds the line bound", "event data is empty (a data: line without a value), not a JSON object",
		"event not ended within 1m0s (70 bytes so far) exceeds the time bound"} {
		m := dlq[i]
		if m.Subject != "tracking.dlq.events" || !strings.Contains(m.Header.Get(layout.HeaderError), want) {
			t.Errorf("dead letter %d: %s %v", i, m.Subject, m.Header)
		}
	}
	if string(dlq[0].Data) != "not json" {
		t.Errorf("non-JSON event not dead-lettered verbatim: %q", dlq[0].Data)
	}
	if !strings.Contains(string(dlq[2].Data), `"size":5242880`) {
		t.Errorf("oversize description = %s", dlq[2].Data)
	}
	if d := string(dlq[3].Data); !strings.Contains(d, `"size":9000`) || !strings.Contains(d, "line bound") ||
		dlq[3].Header.Get(HeaderMsgID) != "long-4" {
		t.Errorf("description of an event of too many lines = %s %v", d, dlq[3].Header)
	}
	if h := dlq[4].Header; len(dlq[4].Data) != 0 || h.Get(HeaderMsgID) != "empty" || h.Get(HeaderEventID) != "empty" ||
		h.Get("Sse-Event") != "GATE_IN" {
		t.Errorf("dead letter of an event with empty data = %q %v, want no data, its id and its event name", dlq[4].Data, h)
	}
	if d := string(dlq[5].Data); !strings.Contains(d, `"size":70`) || !strings.Contains(d, "time bound") ||
		dlq[5].Header.Get(HeaderMsgID) != "slow-6" {
		t.Errorf("description of an event cut for its time = %s %v", d, dlq[5].Header)
	}
	if n := len(e.messages(e.layout.Events())); n != 1 {
		t.Errorf("events stream has %d messages, want 1", n)
	}
}

// TestPublishSurvivesNATSRestart: the server stops and starts again during a burst; every event is
// stored exactly once.
func TestPublishSurvivesNATSRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	obs := &countingObserver{}
	p := e.publisher(256, obs)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	// 6000 events at least, and on until the server is back: the restart, at the 2000th, meets
	// publishes in flight however long a busy machine makes it. Should it find the window empty (every
	// acknowledgement in, the next publishes held in the client's reconnect buffer), it is done again
	// every 2000 events, up to five times, so that the test is about publishes the restart failed.
	var restart sync.WaitGroup
	defer restart.Wait() // the restart must not outlive the test (it shares the server)
	var restarted atomic.Bool
	restarts := 0
	n := 0
	for ; n < 6000 || !restarted.Load() || obs.retried.Load() == 0 && restarts < 5; n++ {
		if n%2000 == 0 && n > 0 && (restarts == 0 || restarted.Load() && obs.retried.Load() == 0 && restarts < 5) {
			restarts++
			restarted.Store(false)
			restart.Wait()
			restart.Go(func() { e.ns.Restart(); restarted.Store(true) })
		}
		if err := p.Handle(ctx, ev(fmt.Sprintf("ev-%05d", n), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d events, %d restarts", n, restarts)
	if last, err := p.Resume(ctx); err != nil || last != fmt.Sprintf("ev-%05d", n-1) {
		t.Fatalf("Resume = %q, %v", last, err)
	}
	assertExactlyOnce(t, e.messages(e.layout.Events()), n)
	if got := obs.published.Load(); got != int64(n) {
		t.Errorf("Published told %d times, want %d", got, n)
	}
	if obs.retried.Load() == 0 {
		t.Error("no publish was sent again: the restart did not hit publishes in flight")
	}
}

// TestResumeAfterCrash: a publisher dies with publishes in flight; a new one resumes from the stream, and
// the upstream's replay does not duplicate what was stored even though the duplicate window has passed.
func TestResumeAfterCrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()

	p1 := e.publisher(64, nil)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	const crashAt = 1000
	handleRange(ctx, t, p1, 0, crashAt)
	// The "crash": p1 is abandoned without Resume; wait until its in-flight publishes landed, and past
	// the duplicate window, so only the cursor can prevent duplicates.
	testutil.Eventually(t, 20*time.Second, "the crashed publisher's messages are stored",
		func() bool { return len(e.messages(e.layout.Events())) == crashAt })
	time.Sleep(300 * time.Millisecond) // let the 100 ms duplicate window pass: the point of the test

	p2 := e.publisher(64, nil)
	resume, err := p2.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if from := resumeIndex(t, resume); from >= crashAt || from < crashAt-64-1 {
		t.Fatalf("resume after %q, want within the last window before ev-%05d", resume, crashAt)
	}
	// The upstream replays everything after the resume id, then new events.
	handleRange(ctx, t, p2, resumeIndex(t, resume)+1, crashAt+500)
	if _, err := p2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, e.messages(e.layout.Events()), crashAt+500)
}

// handleRange hands p the events ev-<from> … ev-<to-1> (type ARRIVED), in order.
func handleRange(ctx context.Context, t *testing.T, p *Publisher, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := p.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "ARRIVED")); err != nil {
			t.Fatal(err)
		}
	}
}

// resumeIndex returns i of the resume id ev-<i>.
func resumeIndex(t *testing.T, resume string) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(resume, "ev-%05d", &i); err != nil {
		t.Fatalf("resume after %q, not an ev-<n> id", resume)
	}
	return i
}

func assertExactlyOnce(t *testing.T, msgs []*jetstream.RawStreamMsg, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Header.Get(HeaderMsgID)]++
	}
	for i := range n {
		id := fmt.Sprintf("ev-%05d", i)
		if seen[id] != 1 {
			t.Errorf("%s stored %d times", id, seen[id])
		}
	}
	if len(msgs) != n {
		t.Errorf("stream holds %d messages, want %d", len(msgs), n)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// countingObserver counts the publisher's outcomes.
type countingObserver struct {
	published, duplicates, retried, latencies, fresh, foreign atomic.Int64
}

func (o *countingObserver) Published(string)                        { o.published.Add(1) }
func (o *countingObserver) Duplicate(string)                        { o.duplicates.Add(1) }
func (o *countingObserver) AckLatency(time.Duration, trace.TraceID) { o.latencies.Add(1) }
func (o *countingObserver) Freshness(time.Duration)                 { o.fresh.Add(1) }
func (o *countingObserver) DeadLettered(string)                     {}
func (o *countingObserver) PublishRetried(error)                    { o.retried.Add(1) }
func (o *countingObserver) ForeignFenceWrite()                      { o.foreign.Add(1) }

// TestPublishUnansweredOrRefused: while the events stream is missing, publishes get no acknowledgement
// (a core subscriber has interest in the subjects, so the server sends nothing back) or JetStream's
// "no responders". The publisher sends the failed ones again until the stream exists, holding further
// events meanwhile: once its window is full, or (a slow stream, a large window) as soon as the next event
// finds an acknowledgement overdue. Every event is then stored exactly once and counted once.
func TestPublishUnansweredOrRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		listener bool
		window   int
		gap      time.Duration
	}{
		{"no responders", false, 8, 0},
		{"no acknowledgement", true, 8, 0},
		{"no acknowledgement, slow stream", true, 1024, 150 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, time.Minute)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
			defer cancel()
			if err := e.js.DeleteStream(ctx, e.layout.Events()); err != nil {
				t.Fatal(err)
			}
			if tc.listener {
				sub, err := e.nc.SubscribeSync("tracking.events.>")
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe()
			}
			obs := &countingObserver{}
			p, err := New(e.nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), Window: tc.window,
				Timeout: 200 * time.Millisecond, Source: "test", Logger: discard(), Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.cursor.loaded = true // the cursor cannot be read from a missing stream; not the point here
			const n = 40
			handled := make(chan struct{}) // every event was taken by Handle
			done := make(chan error, 1)
			go func() {
				for i := range n {
					if err := p.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN")); err != nil {
						done <- err
						return
					}
					time.Sleep(tc.gap)
				}
				close(handled)
				_, err := p.Resume(ctx)
				done <- err
			}()
			testutil.Eventually(t, 20*time.Second, "publishes retried", func() bool { return obs.retried.Load() >= 3 })
			select {
			case <-handled:
				t.Fatal("every event taken while nothing could be stored")
			default:
			}
			if err := e.layout.Ensure(ctx, e.js, true, discard()); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			assertExactlyOnce(t, e.messages(e.layout.Events()), n)
			if got := obs.published.Load(); got != n {
				t.Errorf("Published told %d times, want %d", got, n)
			}
			if got := obs.latencies.Load(); got != n {
				t.Errorf("AckLatency told %d times, want %d", got, n)
			}
		})
	}
}

// TestPublishUpkeepWithoutEvents: events whose acknowledgements never come are sent again, and the resume
// id moves on, with no further event or Resume: Run's upkeep does it on a quiet stream.
func TestPublishUpkeepWithoutEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	if err := e.js.DeleteStream(ctx, e.layout.Events()); err != nil {
		t.Fatal(err)
	}
	sub, err := e.nc.SubscribeSync("tracking.events.>") // interest, so no "no responders": no answer at all
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	obs := &countingObserver{}
	p, err := New(e.nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), Window: 64,
		Timeout: 300 * time.Millisecond, Source: "test", Logger: discard(), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.cursor.loaded = true // the cursor cannot be read from a missing stream; not the point here
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(runCtx) }()

	const n = 3
	handleRange(ctx, t, p, 0, n)
	testutil.Eventually(t, 10*time.Second, "unanswered publishes sent again", func() bool { return obs.retried.Load() > 0 })
	if err := e.layout.Ensure(ctx, e.js, true, discard()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the events stored and the resume id moved on", func() bool {
		return p.LastResumeID() == fmt.Sprintf("ev-%05d", n-1)
	})
	assertExactlyOnce(t, e.messages(e.layout.Events()), n)
	stopRun()
	if err := <-runDone; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// TestResumeSkipsStoredEventsWithoutID: events without an SSE id after the resume point carry that id as
// their Bridge-Stream-Id; a restart past the duplicate window resumes after that id and the upstream
// replays them, so they must be recognised as stored rather than taken for the message that set the id
// (which may also be a dead letter, outside the events stream).
func TestResumeSkipsStoredEventsWithoutID(t *testing.T) {
	t.Parallel()
	for name, setter := range map[string]upstream.Event{
		"published":     ev("ev-a", "GATE_IN"),
		"dead-lettered": {ID: "ev-a", ResumeID: "ev-a", Data: []byte("not json")},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 100*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
			defer cancel()
			noID := func(n int) upstream.Event {
				return upstream.Event{ResumeID: "ev-a", Data: []byte(fmt.Sprintf(`{"type":"GATE_IN","n":%d}`, n))}
			}
			p := e.publisher(8, nil)
			if _, err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			handleAll(ctx, t, p, ev("ev-0", "GATE_IN"), setter) // ev-a: the acknowledged resume point from here on
			if r := handleAll(ctx, t, p, noID(1), noID(2)); r != "ev-a" {
				t.Fatalf("Resume = %q", r)
			}
			time.Sleep(300 * time.Millisecond) // past the duplicate window: only the cursor prevents duplicates

			p2 := e.publisher(8, nil)
			if r, err := p2.Resume(ctx); err != nil || r != "ev-a" {
				t.Fatalf("new publisher: Resume = %q, %v; want ev-a", r, err)
			}
			// The upstream replays what follows ev-a, then goes on.
			handleAll(ctx, t, p2, noID(1), noID(2), ev("ev-b", "GATE_IN"))
			want := 5
			if name == "dead-lettered" {
				want = 4
			}
			if n := len(e.messages(e.layout.Events())); n != want {
				t.Errorf("events stream holds %d messages, want %d", n, want)
			}
		})
	}
}

// TestResumeAfterResentPublish: an event whose first publish failed is stored after events handed after
// it (it is sent again once the window has settled). When events without an id follow it, it is also
// the resume point of the messages after them; a restart past the duplicate window must still recognise
// those stored before it in the stream.
func TestResumeAfterResentPublish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	// A limit of one message per subject with DiscardNew refuses ev-a (an ARRIVED event follows one
	// already stored) until it is lifted, and stores n=1 (the first DEPARTED).
	limitPerSubject := func(on bool) {
		t.Helper()
		s, err := e.js.Stream(ctx, e.layout.Events())
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.MaxMsgsPerSubject, cfg.Discard, cfg.DiscardNewPerSubject = -1, jetstream.DiscardOld, false
		if on {
			cfg.MaxMsgsPerSubject, cfg.Discard, cfg.DiscardNewPerSubject = 1, jetstream.DiscardNew, true
		}
		if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	noID := func(n int) upstream.Event {
		return upstream.Event{ResumeID: "ev-a", Data: []byte(fmt.Sprintf(`{"type":"DEPARTED","n":%d}`, n))}
	}
	evA := upstream.Event{ID: "ev-a", ResumeID: "ev-a", Data: []byte(`{"id":"ev-a","type":"ARRIVED"}`)}

	p := e.publisher(8, nil)
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	handleAll(ctx, t, p, ev("ev-0", "ARRIVED"))
	limitPerSubject(true) // ev-a is refused until the limit is lifted; n=1, handed after it, is stored
	done := make(chan error, 1)
	go func() {
		for _, x := range []upstream.Event{evA, noID(1)} {
			if err := p.Handle(ctx, x); err != nil {
				done <- err
				return
			}
		}
		_, err := p.Resume(ctx)
		done <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the event after ev-a stored", func() bool {
		return len(e.messages(e.layout.Events())) == 2
	})
	limitPerSubject(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	handleAll(ctx, t, p, noID(2)) // its Bridge-Resume-After: ev-a
	msgs := e.messages(e.layout.Events())
	if len(msgs) != 4 || msgs[2].Header.Get(HeaderMsgID) != "ev-a" {
		t.Fatalf("stream holds %d messages; want ev-0, n=1, ev-a, n=2", len(msgs))
	}
	time.Sleep(300 * time.Millisecond) // past the duplicate window: only the cursor prevents duplicates

	p2 := e.publisher(8, nil)
	if r, err := p2.Resume(ctx); err != nil || r != "ev-a" {
		t.Fatalf("new publisher: Resume = %q, %v; want ev-a", r, err)
	}
	handleAll(ctx, t, p2, noID(1), noID(2), ev("ev-b", "GATE_IN")) // the upstream's replay after ev-a
	if n := len(e.messages(e.layout.Events())); n != 5 {
		t.Errorf("events stream holds %d messages, want 5", n)
	}
}

// TestResumeSkipsForeignMessages: a message another client published to P.events.* (an operator's test
// message, without the bridge's headers or with only a Nats-Msg-Id) is not the bridge's: when it is the
// newest in the stream, the cursor still comes from the newest message the bridge wrote, rather than
// being lost (a replay of everything the upstream retains, stored again once past the duplicate window).
func TestResumeSkipsForeignMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()

	p1 := e.publisher(64, nil)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 300
	// The last event names the one before it as the resume point (Bridge-Resume-After): its own replay is
	// JetStream's duplicate, the others are stored beyond it (the window's length of messages before the
	// resume point is read too).
	handleRange(ctx, t, p1, 0, n-1)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	handleRange(ctx, t, p1, n-1, n)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range []nats.Header{nil, {HeaderMsgID: {"operator-test-1"}}} {
		m := &nats.Msg{Subject: "tracking.events.TEST", Header: h, Data: []byte(`{"hello":"test"}`)}
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // past the duplicate window: only the cursor prevents duplicates

	p2 := e.publisher(64, nil)
	resume, err := p2.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if from := resumeIndex(t, resume); from < n-64-1 {
		t.Fatalf("resume after %q, want within the last window before ev-%05d", resume, n)
	}
	// The upstream replays everything after the resume id, then new events.
	handleRange(ctx, t, p2, resumeIndex(t, resume)+1, n+100)
	if _, err := p2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	var events []*jetstream.RawStreamMsg
	for _, m := range e.messages(e.layout.Events()) {
		if m.Subject != "tracking.events.TEST" {
			events = append(events, m)
		}
	}
	assertExactlyOnce(t, events, n+100)
}

// TestResumeAfterEventWithoutStreamID: an SSE message without an id: line resumes after the id before
// it, so a replay after that id repeats it. When such a message is the newest stored, a restart (here
// past the duplicate window) must not store it a second time.
func TestResumeAfterEventWithoutStreamID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	noID := func(id string) upstream.Event { // an SSE message without id:, after ev-00009; its data names id
		ev := ev(id, "GATE_OUT")
		ev.ID, ev.ResumeID = "", "ev-00009"
		return ev
	}

	p1 := e.publisher(64, nil)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	handleRange(ctx, t, p1, 0, 10)
	if _, err := p1.Resume(ctx); err != nil { // ev-00009 is the cursor when the next one is sent
		t.Fatal(err)
	}
	if err := p1.Handle(ctx, noID("x-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past the duplicate window: only the cursor prevents duplicates

	p2 := e.publisher(64, nil)
	resume, err := p2.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if resume != "ev-00009" {
		t.Fatalf("resume after %q, want ev-00009", resume)
	}
	// The upstream replays what came after ev-00009: the message without an id, then new events.
	if err := p2.Handle(ctx, noID("x-1")); err != nil {
		t.Fatal(err)
	}
	if err := p2.Handle(ctx, ev("ev-00010", "ARRIVED")); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range e.messages(e.layout.Events()) {
		seen[m.Header.Get(HeaderMsgID)]++
	}
	if seen["x-1"] != 1 || seen["ev-00010"] != 1 || len(seen) != 12 {
		t.Fatalf("stored %v, want each of 12 events once", seen)
	}
}

// TestPublishAnswersLostPastDuplicateWindow: JetStream stores publishes, but their acknowledgements are
// lost with the connection, and the connection comes back only after the duplicate window (a NATS outage
// that outlasts it). The publisher must not store them a second time when it recovers.
func TestPublishAnswersLostPastDuplicateWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 200*time.Millisecond)
	px := testutil.StartProxy(t, e.ns.URL())
	nc, err := nats.Connect(px.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	obs := &countingObserver{}
	p, err := New(nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), Window: 64,
		Timeout: 5 * time.Second, Source: "https://upstream.test/v1.0/tracking/events/stream", Logger: discard(),
		Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := p.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	px.DropAnswers(true) // from now on the server's answers are lost
	for i := 5; i < 10; i++ {
		if err := p.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "all 10 stored", func() bool { return len(e.messages(e.layout.Events())) == 10 })
	time.Sleep(400 * time.Millisecond) // past the duplicate window
	px.Cut()                           // the connection drops; the next one gets answers again
	if last, err := p.Resume(ctx); err != nil || last != "ev-00009" {
		t.Fatalf("Resume = %q, %v", last, err)
	}
	assertExactlyOnce(t, e.messages(e.layout.Events()), 10)
	if got := obs.published.Load(); got != 10 {
		t.Errorf("Published told %d times, want 10", got)
	}
}

// TestResendAnswersLostPastDuplicateWindow: the server stores a publish and the ones sent again during
// recovery, but its answers do not come back while the connection stays up, for longer than the
// duplicate window. Recovery must look each unanswered send up before sending it again, not store the
// event once per attempt.
func TestResendAnswersLostPastDuplicateWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 200*time.Millisecond)
	px := testutil.StartProxy(t, e.ns.URL())
	nc, err := nats.Connect(px.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p, err := New(nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), Window: 8,
		Timeout: 500 * time.Millisecond, Source: "https://upstream.test/v1.0/tracking/events/stream",
		Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	px.DropAnswers(true) // the server's answers are lost, the connection stays up
	if err := p.Handle(ctx, ev("ev-00000", "GATE_IN")); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		last, _ := p.Resume(ctx)
		done <- last
	}()
	time.Sleep(4 * time.Second) // several timeouts, each past the duplicate window
	px.Cut()                    // the connection drops; the next one gets answers again
	if last := <-done; last != "ev-00000" {
		t.Fatalf("Resume = %q", last)
	}
	assertExactlyOnce(t, e.messages(e.layout.Events()), 1)
}

// TestDuplicatesCounted: an event JetStream acknowledges as a duplicate (its id stored before, within the
// duplicate window) is told as a Duplicate, not as Published, and has no freshness (its copy was stored
// before; a replay would report its whole age); the start of each run of duplicates is logged once.
func TestDuplicatesCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	obs := &countingObserver{}
	logs := &testutil.Logs{}
	p, err := New(e.nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), DLQStream: e.layout.DLQ(),
		Window: 16, Timeout: 2 * time.Second, Logger: slog.New(logs), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	// An upstream that reuses ids: a run of two duplicates, then one more after an event stored in between.
	for _, id := range []string{"a", "b", "a", "b", "c", "a", "d"} {
		if err := p.Handle(ctx, ev(id, "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	// One Resume at the end: a Resume between events would be a reconnect, after which the publisher
	// recognises replayed ids itself. JetStream answers one connection's publishes to a stream in order.
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(e.messages(e.layout.Events())); got != 4 {
		t.Fatalf("stream holds %d events, want 4", got)
	}
	if p, d := obs.published.Load(), obs.duplicates.Load(); p != 4 || d != 3 {
		t.Errorf("published %d, duplicates %d; want 4 and 3", p, d)
	}
	if f := obs.fresh.Load(); f != 4 {
		t.Errorf("freshness observed %d times, want 4 (the events published, not the duplicates)", f)
	}
	if n := logs.Count(slog.LevelWarn, duplicatesLine); n != 2 {
		t.Errorf("the start of a run of duplicates was logged %d times, want 2 (one per run)", n)
	}
	if v, _ := logs.Attr(duplicatesLine, "found_by"); v.String() != foundByJetStream {
		t.Errorf("duplicates found by %q, want %q", v, foundByJetStream)
	}
}

// duplicatesLine is the message of the log line for a run of duplicates.
const duplicatesLine = "events found stored before are not stored again: an upstream replay, another bridge on " +
	"the same stream, or reused ids; they are counted in bridge_events_duplicates_total, not as published"

// TestSkippedCountAsDuplicates: an upstream that restarted and reuses the ids of 40 stored events, and
// replays them to a bridge that restarted too. The events stored beyond the resume point are skipped
// without a publish; they count as duplicates as those JetStream finds in its duplicate window do, and
// the run of them is logged once.
func TestSkippedCountAsDuplicates(t *testing.T) {
	t.Parallel()
	const n = 40
	e := newEnv(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	p1 := e.publisher(64, nil)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	// The last event names the one before it as the resume point (Bridge-Resume-After): its own replay is
	// JetStream's duplicate, the others are stored beyond it (the window's length of messages before the
	// resume point is read too).
	handleRange(ctx, t, p1, 0, n-1)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	handleRange(ctx, t, p1, n-1, n)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}

	obs := &countingObserver{}
	logs := &testutil.Logs{}
	p2, err := New(e.nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), DLQStream: e.layout.DLQ(),
		Window: 64, Timeout: 2 * time.Second, Logger: slog.New(logs), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if _, err := p2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	handleRange(ctx, t, p2, 0, n+2) // the 40 again, from the upstream's beginning, then two new ones
	if _, err := p2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, e.messages(e.layout.Events()), n+2)
	if p, d := obs.published.Load(), obs.duplicates.Load(); p != 2 || d != n {
		t.Errorf("published %d, duplicates %d; want 2 and %d", p, d, n)
	}
	if c := logs.Count(slog.LevelWarn, duplicatesLine); c != 1 {
		t.Errorf("the run of duplicates was logged %d times, want once", c)
	}
	if v, _ := logs.Attr(duplicatesLine, "found_by"); v.String() != foundByCursor {
		t.Errorf("duplicates found by %q, want %q", v, foundByCursor)
	}
	if v, _ := logs.Attr(duplicatesLine, "event_id"); v.String() != "ev-00000" {
		t.Errorf("the run's first duplicate logged as %q, want ev-00000", v)
	}
}
