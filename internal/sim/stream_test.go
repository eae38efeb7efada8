package sim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/launchdarkly/eventsource"
)

func TestStreamGeneratedEvents(t *testing.T) {
	e := newEnv(t, Options{EventRate: -1, EventLimit: 120, EventSize: 1000})
	tok := e.login("demo")
	resp := e.openStream(tok, "")
	if ct, cc := resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"); ct != "text/event-stream" || cc != "no-cache" {
		t.Errorf("Content-Type %q Cache-Control %q", ct, cc)
	}
	rd := newSSEReader(t, resp)
	for seq := 1; seq <= 120; seq++ {
		ev := rd.next()
		k := int64(seq - 1)
		_, typ := variantOf(k)
		if ev.Id() != EventID(seq) || ev.Event() != eventTypes[typ] {
			t.Fatalf("event %d: id %q name %q", seq, ev.Id(), ev.Event())
		}
		if id, data := e.sim.GeneratedEvent("demo", seq); id != ev.Id() || string(data) != ev.Data() {
			t.Fatalf("GeneratedEvent(%d) = %q, %s; streamed %s", seq, id, data, ev.Data())
		}
		var d struct {
			ID          string
			Timestamp   time.Time
			Type        string
			Observation struct {
				ObservedLoadingUnit struct{ LoadingUnit LoadingUnitTracking }
				Location            Location
			}
		}
		if err := json.Unmarshal([]byte(ev.Data()), &d); err != nil {
			t.Fatalf("data %q: %v", ev.Data(), err)
		}
		if d.ID != ev.Id() || d.Type != ev.Event() || d.Timestamp.IsZero() ||
			!strings.Contains(ev.Data(), `"timestamp":"`+d.Timestamp.UTC().Format(time.RFC3339Nano)+`"`) {
			t.Errorf("data %s", ev.Data())
		}
		if n := len(ev.Data()); n < 900 || n > 1100 {
			t.Errorf("data of %d bytes, want about 1000", n)
		}
		lu := d.Observation.ObservedLoadingUnit.LoadingUnit
		if lu.Number == nil || d.Observation.Location.ID == "" {
			t.Errorf("observation incomplete: %s", ev.Data())
		}
		if lu.Identification != nil && *lu.Identification == "BIC" && checkDigit((*lu.Number)[:10]) != int((*lu.Number)[10]-'0') {
			t.Errorf("bad BIC check digit: %s", *lu.Number)
		}
	}
	if st := e.sim.Stats(); st.StreamConnects != 1 || st.EventsWritten != 120 {
		t.Errorf("stats %+v", st)
	}
}

func TestStreamReplay(t *testing.T) {
	e := newEnv(t, Options{EventRate: -1, EventLimit: 20})
	tok := e.login("demo")
	resp := e.openStream(tok, "")
	rd := newSSEReader(t, resp)
	for range 20 {
		rd.next()
	}
	resp.Body.Close()

	tests := []struct {
		name    string
		lastID  string
		wantSeq int
	}{
		{"after a known id", EventID(7), 8},
		{"after the last id", EventID(19), 20},
		{"unknown id", "no-such-id", 1},
		{"id from the future", EventID(500), 1},
		{"no id", "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := e.openStream(tok, tt.lastID)
			defer resp.Body.Close()
			if ev := newSSEReader(t, resp).next(); ev.Id() != EventID(tt.wantSeq) {
				t.Errorf("first event %q, want %q", ev.Id(), EventID(tt.wantSeq))
			}
		})
	}
	want := []string{"", EventID(7), EventID(19), "no-such-id", EventID(500), ""}
	if got := e.sim.Stats().LastEventIDs; !slices.Equal(got, want) {
		t.Errorf("LastEventIDs %q, want %q", got, want)
	}
}

func TestStreamRateScheduling(t *testing.T) {
	const rate, n = 200.0, 30
	e := newEnv(t, Options{EventRate: rate, EventLimit: n})
	tok := e.login("demo")
	connected := time.Now()
	rd := newSSEReader(t, e.openStream(tok, ""))
	var prev time.Time
	for seq := 1; seq <= n; seq++ {
		ev := rd.next()
		got := time.Now()
		var d struct{ Timestamp time.Time }
		if err := json.Unmarshal([]byte(ev.Data()), &d); err != nil || ev.Id() != EventID(seq) {
			t.Fatalf("event %q: %v", ev.Id(), err)
		}
		if seq == 1 && (d.Timestamp.Before(connected.Add(-time.Second)) || d.Timestamp.After(got)) {
			t.Errorf("first event stamped %v, connected at %v", d.Timestamp, connected)
		}
		if seq > 1 && d.Timestamp.Sub(prev) != time.Second/rate {
			t.Errorf("event %d stamped %v after the previous one, want %v", seq, d.Timestamp.Sub(prev), time.Second/rate)
		}
		// Written when due, not before; generous bound for -race on a busy machine.
		if lat := got.Sub(d.Timestamp); lat < 0 || lat > 500*time.Millisecond {
			t.Errorf("event %d received %v after its timestamp", seq, lat)
		}
		prev = d.Timestamp
	}
}

func TestStreamHeartbeatAndRetry(t *testing.T) {
	e := newEnv(t, Options{Heartbeat: 20 * time.Millisecond, Retry: 1500 * time.Millisecond})
	resp := e.openStream(e.login("demo"), "")
	got := readUntil(t, resp.Body, heartbeat+heartbeat)
	if !strings.HasPrefix(got, "retry: 1500\n\n"+heartbeat) {
		t.Errorf("stream starts with %q", got)
	}
}

func TestStreamDropEvery(t *testing.T) {
	e := newEnv(t, Options{EventRate: -1, EventLimit: 10, Faults: Faults{DropEvery: 3}})
	tok := e.login("demo")
	last := ""
	for conn := range 3 {
		resp := e.openStream(tok, last)
		dec := eventsource.NewDecoder(resp.Body)
		for i := range 3 {
			ev, err := dec.Decode()
			if err != nil {
				t.Fatalf("connection %d event %d: %v", conn, i, err)
			}
			if want := EventID(conn*3 + i + 1); ev.Id() != want {
				t.Fatalf("connection %d: id %q, want %q", conn, ev.Id(), want)
			}
			last = ev.Id()
		}
		if _, err := dec.Decode(); err != io.EOF {
			t.Errorf("connection %d after 3 events: %v, want a clean end", conn, err)
		}
		resp.Body.Close()
	}
}

func TestStreamDropMidEvent(t *testing.T) {
	e := newEnv(t, Options{EventRate: -1, EventLimit: 10, Faults: Faults{DropEvery: 2, DropMidEvent: true}})
	tok := e.login("demo")
	raw, err := io.ReadAll(e.openStream(tok, "").Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("reading the cut stream: %v, want an unexpected EOF", err)
	}
	s := string(raw)
	complete := strings.Count(s, "\n\n")
	tail := s[strings.LastIndex(s, "\n\n")+2:]
	if complete != 2 || !strings.HasPrefix(tail, "id: "+EventID(3)+"\n") || len(tail) < 100 {
		t.Errorf("%d complete events, then %q", complete, tail)
	}

	// The client library sees two events and then an error that is not a clean end.
	dec := eventsource.NewDecoder(e.openStream(tok, EventID(2)).Body)
	for i := 3; i <= 4; i++ {
		if ev, err := dec.Decode(); err != nil || ev.Id() != EventID(i) {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if _, err := dec.Decode(); err == nil || err == io.EOF {
		t.Errorf("after the cut: %v, want an error", err)
	}

	// Switching the fault off at run time lets the whole log through.
	e.sim.SetFaults(Faults{})
	rd := newSSEReader(t, e.openStream(tok, EventID(4)))
	for i := 5; i <= 10; i++ {
		if ev := rd.next(); ev.Id() != EventID(i) {
			t.Fatalf("id %q, want %q", ev.Id(), EventID(i))
		}
	}
}

func TestStreamFaultAnswers(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	get := func() *http.Response {
		resp := e.openStream(tok, "")
		resp.Body.Close()
		return resp
	}
	e.sim.SetFaults(Faults{StreamStatus: 403})
	resp := e.openStream(tok, "")
	var m apiMessage
	if err := json.NewDecoder(resp.Body).Decode(&m); resp.StatusCode != 403 || err != nil || len(m.Messages) != 1 {
		t.Errorf("StreamStatus 403: %d %v", resp.StatusCode, err)
	}
	e.sim.SetFaults(Faults{StreamStatus: 404})
	if r := get(); r.StatusCode != 404 {
		t.Errorf("StreamStatus 404: %d", r.StatusCode)
	}
	e.sim.SetFaults(Faults{StreamContentType: "application/json"})
	if r := get(); r.StatusCode != 200 || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("StreamContentType: %d %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	e.sim.SetFaults(Faults{ErrorRate: 1}) // answered before authentication: not a stream request
	if r := get(); r.StatusCode != 503 {
		t.Errorf("ErrorRate 1: %d", r.StatusCode)
	}
	e.sim.SetFaults(Faults{})
	if resp := e.openStream("", ""); resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d", resp.StatusCode)
	}
	e.sim.ExpireTokens()
	if resp := e.openStream(tok, ""); resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "expired") {
		t.Errorf("expired token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if st := e.sim.Stats(); st.StreamRequests != 3 || st.StreamConnects != 1 {
		t.Errorf("stream requests %d connects %d", st.StreamRequests, st.StreamConnects)
	}
}

func TestInject(t *testing.T) {
	e := newEnv(t, Options{Heartbeat: -1})
	tok := e.login("demo")
	huge := strings.Repeat("0123456789", 100_000)
	e.sim.Inject("demo", "custom-1", "GATE_IN", []byte(`{"type":"GATE_IN"}`))
	e.sim.Inject("demo", "", "", []byte("line 1\r\nline 2\rline 3\n\n:not a comment\nid: fake\n"))
	e.sim.Inject("demo", "custom-3", "NEW_KIND", []byte(huge))
	e.sim.Inject("demo", "custom-4", "", nil)

	rd := newSSEReader(t, e.openStream(tok, ""))
	ev := rd.next()
	if ev.Id() != "custom-1" || ev.Event() != "GATE_IN" || ev.Data() != `{"type":"GATE_IN"}` {
		t.Errorf("first: %q %q %q", ev.Id(), ev.Event(), ev.Data())
	}
	ev = rd.next()
	if ev.Id() != "" || ev.Event() != "" || ev.Data() != "line 1\nline 2\nline 3\n\n:not a comment\nid: fake\n" {
		t.Errorf("second: %q %q %q", ev.Id(), ev.Event(), ev.Data())
	}
	if ev := rd.next(); ev.Id() != "custom-3" || ev.Event() != "NEW_KIND" || ev.Data() != huge {
		t.Errorf("third: %q %q %d bytes", ev.Id(), ev.Event(), len(ev.Data()))
	}
	// An event with empty data has an empty data line (next skips no-data blocks only when they have no id).
	if ev := rd.next(); ev.Id() != "custom-4" || ev.Data() != "" {
		t.Errorf("fourth: %q %q", ev.Id(), ev.Data())
	}
	// Live: an injected event reaches the open connection.
	e.sim.Inject("demo", "custom-5", "DEPARTED", []byte("{}"))
	if ev := rd.next(); ev.Id() != "custom-5" {
		t.Errorf("live: %q", ev.Id())
	}
	// Resuming after an injected id continues after it.
	if ev := newSSEReader(t, e.openStream(tok, "custom-3")).next(); ev.Id() != "custom-4" {
		t.Errorf("after custom-3: %q", ev.Id())
	}
}

func TestStreamRetention(t *testing.T) {
	e := newEnv(t, Options{EventRate: -1, EventLimit: 25, Retention: 10})
	tok := e.login("demo")
	rd := newSSEReader(t, e.openStream(tok, ""))
	for i := 1; i <= 25; i++ {
		if ev := rd.next(); ev.Id() != EventID(i) {
			t.Fatalf("id %q, want %q", ev.Id(), EventID(i))
		}
	}
	for _, last := range []string{"", EventID(3)} {
		if ev := newSSEReader(t, e.openStream(tok, last)).next(); ev.Id() != EventID(16) {
			t.Errorf("Last-Event-ID %q: first %q, want the first retained %q", last, ev.Id(), EventID(16))
		}
	}
	if ev := newSSEReader(t, e.openStream(tok, EventID(15))).next(); ev.Id() != EventID(16) {
		t.Errorf("after %s: %q", EventID(15), ev.Id())
	}
	if id, data := e.sim.GeneratedEvent("demo", 3); id != "" || data != nil {
		t.Errorf("GeneratedEvent of a dropped entry: %q", id)
	}
}

func TestCloseEndsStreams(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	resp := e.openStream(tok, "")
	waitFor(t, "the stream connection", func() bool { return e.sim.Stats().StreamConnects == 1 })
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		done <- err
	}()
	e.sim.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("stream ended with %v, want a clean end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open after Close")
	}
	if r := e.openStream(tok, ""); r.StatusCode != 503 {
		t.Errorf("connect after Close: %d", r.StatusCode)
	}
}

func TestRunReturnsOnCancel(t *testing.T) {
	s := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case <-s.closed:
	default:
		t.Error("Run did not close the server")
	}
}

// TestResumeAcrossDropsWhileFaultsChange reads a flood across connections dropped at random points
// (clean and mid-event), with the faults changed concurrently, and checks every event arrives once and in
// order when each connection resumes after the last complete event.
func TestResumeAcrossDropsWhileFaultsChange(t *testing.T) {
	const n = 5000
	e := newEnv(t, Options{EventRate: -1, EventLimit: n})
	tok := e.login("demo")
	stop := make(chan struct{})
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			e.sim.SetFaults(Faults{DropEvery: 300 + i%500, DropMidEvent: i%2 == 0})
		}
	}()
	defer func() { close(stop); <-flipped }()

	last, conns := "", 0
	for next := 1; next <= n; {
		conns++
		if conns > 1000 {
			t.Fatal("too many connections")
		}
		resp := e.openStream(tok, last)
		dec := eventsource.NewDecoder(resp.Body)
		for next <= n {
			ev, err := dec.Decode()
			if err != nil {
				break
			}
			if ev.Id() != EventID(next) {
				t.Fatalf("connection %d: id %q, want %q", conns, ev.Id(), EventID(next))
			}
			last = ev.Id()
			next++
		}
		resp.Body.Close()
	}
	t.Logf("%d events over %d connections", n, conns)
}
