package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Ids that nats.go would mangle in a header (it trims edge white space and turns CR and LF into spaces),
// ids that look like the encoded forms, and an id too long to carry.
var awkwardIDs = []string{
	"a b", "a\nb", "a\rb", " a b", "a b ", "\t", " ", "x\x00y", "base64url:YQ", "sha256-id:00",
	"Zöll-7", "\u00a0nbsp\u00a0", strings.Repeat("L", MaxHeaderID+1),
}

func TestHeaderIDRoundTrip(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, id := range append([]string{"ev-1", "sha256:ab12", "01HF-ULID"}, awkwardIDs...) {
		h := HeaderID(id)
		if prev, dup := seen[h]; dup {
			t.Errorf("ids %q and %q share the header %q", prev, id, h)
		}
		seen[h] = id
		if h == "" || textproto.TrimString(h) != h || strings.ContainsAny(h, "\r\n\x00") || len(h) > MaxHeaderID+100 {
			t.Errorf("HeaderID(%q) = %q: not a safe header value", id, h)
		}
		back, ok := ParseHeaderID(h)
		if len(id) > MaxHeaderID {
			if ok {
				t.Errorf("ParseHeaderID(%q) claims to recover a digested id", h)
			}
			continue
		}
		if !ok || back != id {
			t.Errorf("ParseHeaderID(HeaderID(%q)) = %q, %v", id, back, ok)
		}
	}
	if h := HeaderID("ev-1"); h != "ev-1" {
		t.Errorf("a plain id was changed: %q", h)
	}
}

// FuzzHeaderID: every id gets a header value nats.go carries unchanged, and distinct ids get distinct
// values (checked through the round trip).
func FuzzHeaderID(f *testing.F) {
	for _, id := range awkwardIDs {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		h := HeaderID(id)
		if h == "" || textproto.TrimString(h) != h || strings.ContainsAny(h, "\r\n") {
			t.Fatalf("HeaderID(%q) = %q", id, h)
		}
		if back, ok := ParseHeaderID(h); len(id) <= MaxHeaderID && (!ok || back != id) {
			t.Fatalf("round trip of %q gave %q, %v", id, back, ok)
		}
	})
}

// TestDeadLettersFitMaxPayload: a non-JSON event as large as max_payload, and events with a huge event
// name or id, are dead-lettered as descriptions that fit; the stream goes on behind them.
func TestDeadLettersFitMaxPayload(t *testing.T) {
	t.Parallel()
	const max = 64 << 10
	e := newEnvWith(t, time.Minute, func(o *server.Options) { o.MaxPayload = max })
	p := e.publisher(8, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	bigID := strings.Repeat("i", 40<<10)
	for _, x := range []upstream.Event{
		{ID: "raw-1", ResumeID: "raw-1", Data: []byte(strings.Repeat("x", max-10))},
		{ID: "raw-2", ResumeID: "raw-2", Name: strings.Repeat("n", 60<<10), Data: []byte("not json")},
		{ID: bigID, ResumeID: bigID, Data: []byte(strings.Repeat("y", 30<<10))},
		{ID: "big-4", ResumeID: "big-4", Data: []byte(`{"type":"GATE_IN","pad":"` + strings.Repeat("z", max) + `"}`)},
		ev("ok-5", "GATE_IN"),
	} {
		if err := p.Handle(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if last, err := p.Resume(ctx); err != nil || last != "ok-5" {
		t.Fatalf("Resume = %q, %v: the stream stopped behind a dead letter", last, err)
	}
	dlq := e.deadLetters(4, max)
	var d struct {
		Error, Reason, ID string
		Prefix            string `json:"data_prefix"`
		Size              int
	}
	if err := json.Unmarshal(dlq[0].Data, &d); err != nil {
		t.Fatalf("dead letter 0 is not a description: %v (%d bytes)", err, len(dlq[0].Data))
	}
	if d.Size != max-10 || d.ID != "raw-1" || d.Prefix != strings.Repeat("x", layout.DataPrefix) ||
		!strings.Contains(d.Reason, "not a JSON object") {
		t.Errorf("description = %+v", d)
	}
	if got := dlq[0].Header.Get(layout.HeaderError); !strings.Contains(got, "max_payload") {
		t.Errorf("Bridge-Error = %q", got)
	}
	if string(dlq[1].Data) != "not json" || len(dlq[1].Header.Get("Sse-Event")) > MaxSSEEventHeader {
		t.Errorf("dead letter 1: data %q, Sse-Event of %d bytes", dlq[1].Data, len(dlq[1].Header.Get("Sse-Event")))
	}
	if got := dlq[2].Header.Get(HeaderMsgID); got != HeaderID(bigID) || !strings.HasPrefix(got, digestIDPrefix) {
		t.Errorf("dead letter 2: Nats-Msg-Id %q", got)
	}
	if !strings.Contains(string(dlq[3].Data), "max_payload") {
		t.Errorf("dead letter 3 = %.200s", dlq[3].Data)
	}
	if n := len(e.messages(e.layout.Events())); n != 1 {
		t.Errorf("events stream holds %d messages, want 1", n)
	}
}

// TestAwkwardIDsStoredApart: events whose ids nats.go would mangle are stored once each, under distinct
// ids, and a new publisher resumes after the exact last id; the upstream's replay adds nothing.
func TestAwkwardIDsStoredApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	ids := append([]string{"ev-0"}, awkwardIDs[:len(awkwardIDs)-1]...) // the long id: see TestLongResumeID
	ids = append(ids, "base64url:last", " last\t")                     // the resume point after a restart travels encoded
	p := e.publisher(4, nil)
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, id := range ids {
		if err := p.Handle(ctx, jsonEvent(id)); err != nil {
			t.Fatal(err)
		}
		// One at a time, so that every message names the previous id as its resume point: the last one
		// HTTP can carry as Last-Event-ID (see TestUnresumableIDsNeverResumePoints).
		if upstream.Resumable(id) {
			want = id
		}
		if last, err := p.Resume(ctx); err != nil || last != want {
			t.Fatalf("Resume = %q, %v; want %q", last, err, want)
		}
	}
	msgs := e.messages(e.layout.Events())
	if len(msgs) != len(ids) {
		t.Fatalf("stored %d messages for %d distinct ids", len(msgs), len(ids))
	}
	for i, m := range msgs {
		if id, ok := ParseHeaderID(m.Header.Get(HeaderEventID)); !ok || id != ids[i] {
			t.Errorf("message %d: Tracking-Event-Id %q stands for %q, want %q", i, m.Header.Get(HeaderEventID), id, ids[i])
		}
	}

	// After a crash and past the duplicate window, a new publisher reads the resume point from the last
	// message: the exact id before it, which travelled encoded. The replay of the last event is
	// recognised.
	time.Sleep(300 * time.Millisecond)
	p2 := e.publisher(4, nil)
	if last, err := p2.Resume(ctx); err != nil || last != ids[len(ids)-2] {
		t.Fatalf("new publisher: Resume = %q, %v; want %q", last, err, ids[len(ids)-2])
	}
	for _, id := range []string{ids[len(ids)-1], "after"} {
		if err := p2.Handle(ctx, jsonEvent(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p2.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(e.messages(e.layout.Events())); n != len(ids)+1 {
		t.Errorf("after the replay the stream holds %d messages, want %d", n, len(ids)+1)
	}
}

// deadLetters returns the dead letters stored, after checking that there are n, each of at most max bytes.
func (e *testEnv) deadLetters(n int, max int64) []*jetstream.RawStreamMsg {
	e.t.Helper()
	dlq := e.messages(e.layout.DLQ())
	if len(dlq) != n {
		e.t.Fatalf("dead letters = %d, want %d", len(dlq), n)
	}
	for i, m := range dlq {
		if size := layout.MsgSize(&nats.Msg{Header: m.Header, Data: m.Data}); int64(size) > max {
			e.t.Errorf("dead letter %d: %d bytes, over the %d bytes NATS stores", i, size, max)
		}
	}
	return dlq
}

// handleAll hands the events to p in order, waits until all are stored and returns the resume id.
func handleAll(ctx context.Context, t *testing.T, p *Publisher, evs ...upstream.Event) string {
	t.Helper()
	for _, x := range evs {
		if err := p.Handle(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	resume, err := p.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return resume
}

// jsonEvent is an event whose SSE id and data id are id.
func jsonEvent(id string) upstream.Event {
	data, _ := json.Marshal(map[string]string{"id": id, "type": "GATE_IN"})
	return upstream.Event{ID: id, ResumeID: id, Data: data}
}

// TestLongResumeID: an id too long to keep never becomes a resume point: a new publisher resumes from
// the id before it, and the replay stores nothing twice.
func TestLongResumeID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	long := strings.Repeat("L", MaxHeaderID+1)
	p := e.publisher(4, nil)
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	// One at a time, so that ev-4 is sent after the long id, which becomes its resume point.
	for _, id := range []string{"ev-1", "ev-2", long, "ev-4"} {
		if err := p.Handle(ctx, jsonEvent(id)); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Resume(ctx); err != nil {
			t.Fatal(err)
		}
	}
	msgs := e.messages(e.layout.Events())
	if got := msgs[len(msgs)-1].Header.Get(HeaderResumeAfter); got != "ev-2" {
		t.Fatalf("ev-4 names %q as its resume point, want ev-2 (a digest cannot be resumed from)", got)
	}
	time.Sleep(300 * time.Millisecond) // past the duplicate window: only the cursor prevents duplicates
	p2 := e.publisher(4, nil)
	last, err := p2.Resume(ctx)
	if err != nil || last != "ev-2" {
		t.Fatalf("new publisher: Resume = %q, %v; want ev-2", last, err)
	}
	handleAll(ctx, t, p2, jsonEvent(long), jsonEvent("ev-4"), jsonEvent("ev-5"))
	if n := len(e.messages(e.layout.Events())); n != 5 {
		t.Errorf("stream holds %d messages, want 5", n)
	}
}

// TestOversizeWithoutIDKeptApart: oversize events of one size without an id are distinct dead letters,
// and their replay after a reconnect is recognised.
func TestOversizeWithoutIDKeptApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	p := e.publisher(8, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	oversize := upstream.Event{ResumeID: "ev-1", Oversize: 2 << 20}
	if resume := handleAll(ctx, t, p, ev("ev-1", "GATE_IN"), oversize, oversize); resume != "ev-1" {
		t.Fatalf("Resume = %q", resume)
	}
	// A reconnect: the upstream replays what follows ev-1, then goes on.
	handleAll(ctx, t, p, oversize, oversize, ev("ev-2", "GATE_IN"), upstream.Event{ResumeID: "ev-2", Oversize: 2 << 20})
	dlq := e.messages(e.layout.DLQ())
	if len(dlq) != 3 {
		for _, m := range dlq {
			t.Log(m.Header.Get(HeaderMsgID), string(m.Data))
		}
		t.Fatalf("dead letters = %d, want 3", len(dlq))
	}
}

// TestLongIDDeadLetterKeepsCursor: a dead-lettered event with an id too long to keep (its dead letter is
// in the DLQ stream, where the cursor does not look) leaves the resume cursor usable: after a restart
// past the duplicate window and the tail the cursor reads, no event is stored twice.
func TestLongIDDeadLetterKeepsCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const window, before = 8, 1100 // the cursor reads at most 2*8+1000 messages back
	long := strings.Repeat("L", MaxHeaderID+1)
	var all []upstream.Event
	for i := range before {
		all = append(all, ev(fmt.Sprintf("ev-%05d", i), "ARRIVED"))
	}
	all = append(all, upstream.Event{ID: long, ResumeID: long, Data: []byte("not json")}, ev("ev-after", "ARRIVED"))
	p := e.publisher(window, nil)
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for i, x := range all {
		if err := p.Handle(ctx, x); err != nil {
			t.Fatal(err)
		}
		if i == before { // the long id is the acknowledged resume point when ev-after is sent
			if _, err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)

	p2 := e.publisher(window, nil)
	resume, err := p2.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	from := -1
	for i, x := range all {
		if x.ResumeID == resume {
			from = i
		}
	}
	if from < before-1 {
		t.Fatalf("resume after %.20q: the upstream would replay %d events the cursor cannot recognise", resume, before-1-from)
	}
	handleAll(ctx, t, p2, all[from+1:]...)
	if n := len(e.messages(e.layout.Events())); n != before+1 {
		t.Errorf("events stream holds %d messages, want %d", n, before+1)
	}
	// The replay may dead-letter the long-id event again: the cursor reads the events stream only, and
	// the duplicate window has passed. A second dead letter is the price of resuming from a usable id.
	if n := len(e.messages(e.layout.DLQ())); n < 1 || n > 2 {
		t.Errorf("%d dead letters, want 1 or 2", n)
	}
}

// TestHugeHeaderValuesDoNotStall: a type or a timestamp longer than JetStream's 64 KiB header block
// allows (though the message fits max_payload) is cut or left out of the headers, and the stream goes on.
func TestHugeHeaderValuesDoNotStall(t *testing.T) {
	t.Parallel()
	for name, data := range map[string]string{
		"type": `{"id":"big","type":"` + strings.Repeat("T", 70000) + `"}`,
		"time": `{"id":"big","type":"GATE_IN","timestamp":"2024-01-01T00:00:00.` + strings.Repeat("0", 70000) + `Z"}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, time.Minute)
			p := e.publisher(8, nil)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(15*time.Second))
			defer cancel()
			if _, err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			for _, x := range []upstream.Event{{ID: "big", ResumeID: "big", Data: []byte(data)}, ev("ok-2", "GATE_IN")} {
				if err := p.Handle(ctx, x); err != nil {
					t.Fatal(err)
				}
			}
			if last, err := p.Resume(ctx); err != nil || last != "ok-2" {
				t.Fatalf("Resume = %q, %v: the stream stopped behind a 70,000-byte %s", last, err, name)
			}
			msgs := e.messages(e.layout.Events())
			if len(msgs) != 2 || string(msgs[0].Data) != data {
				t.Fatalf("stored %d messages; the first verbatim: %v", len(msgs), len(msgs) > 0 && string(msgs[0].Data) == data)
			}
			if typ := msgs[0].Header.Get(HeaderEventType); len(typ) > MaxTypeHeader {
				t.Errorf("Tracking-Event-Type of %d bytes", len(typ))
			}
			if name == "time" && msgs[0].Header.Get("ce-time") != "" {
				t.Errorf("ce-time kept: %.40q…", msgs[0].Header.Get("ce-time"))
			}
		})
	}
}

// TestPositionAfterIDOnlyBlock: an SSE block with an id and no data sets the resume id without an event;
// an oversize event without an id behind it keeps its description, so its replay after that id is
// recognised.
func TestPositionAfterIDOnlyBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	p := e.publisher(8, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	// The stream: b, "id: c" alone (never handed over), y (no id), x (oversize, no id).
	y := upstream.Event{ResumeID: "c", Data: []byte(`{"type":"GATE_IN","n":1}`)}
	x := upstream.Event{ResumeID: "c", Oversize: 2 << 20}
	if r := handleAll(ctx, t, p, ev("b", "GATE_IN"), y, x); r != "c" {
		t.Fatalf("Resume = %q", r)
	}
	// A reconnect with Last-Event-ID c: the upstream replays y and x.
	handleAll(ctx, t, p, y, x)
	if dlq := e.messages(e.layout.DLQ()); len(dlq) != 1 {
		for _, m := range dlq {
			t.Logf("%s", m.Data)
		}
		t.Errorf("dead letters = %d, want 1", len(dlq))
	}
}

// TestUnresumableIDsNeverResumePoints: ids HTTP cannot carry back as Last-Event-ID (control characters,
// edge white space) are stored like any other, but the resume point stays at the last id that can be
// sent: the stream reconnects after it (the replay of the rest is recognised) instead of stopping.
func TestUnresumableIDsNeverResumePoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	p := e.publisher(4, nil)
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if got := handleAll(ctx, t, p, jsonEvent("ev-1")); got != "ev-1" {
		t.Fatalf("Resume = %q", got)
	}
	if got := handleAll(ctx, t, p, jsonEvent(" ev-2"), jsonEvent("ev-3\x01")); got != "ev-1" {
		t.Fatalf("Resume = %q, want ev-1: the last id that can be sent as Last-Event-ID", got)
	}
	// The upstream's replay after ev-1, then new events, one at a time: each names the resume point in
	// Bridge-Resume-After.
	if got := handleAll(ctx, t, p, jsonEvent(" ev-2"), jsonEvent("ev-3\x01"), jsonEvent("ev-4")); got != "ev-4" {
		t.Fatalf("Resume = %q, want ev-4", got)
	}
	for _, id := range []string{"ev-5 ", "ev-6\x02"} {
		if got := handleAll(ctx, t, p, jsonEvent(id)); got != "ev-4" {
			t.Fatalf("Resume = %q, want ev-4", got)
		}
	}
	if got := p.LastResumeID(); got != "ev-4" {
		t.Errorf("LastResumeID = %q", got)
	}
	if n := len(e.messages(e.layout.Events())); n != 6 {
		t.Fatalf("events stream holds %d messages, want 6", n)
	}

	// After a restart past the duplicate window: resume after ev-4, and the replay is recognised.
	time.Sleep(1200 * time.Millisecond)
	p2 := e.publisher(4, nil)
	if got, err := p2.Resume(ctx); err != nil || got != "ev-4" {
		t.Fatalf("new publisher: Resume = %q, %v; want ev-4", got, err)
	}
	if got := handleAll(ctx, t, p2, jsonEvent("ev-5 "), jsonEvent("ev-6\x02"), jsonEvent("ev-7")); got != "ev-7" {
		t.Fatalf("Resume = %q", got)
	}
	if n := len(e.messages(e.layout.Events())); n != 7 {
		t.Errorf("events stream holds %d messages, want 7", n)
	}
}
