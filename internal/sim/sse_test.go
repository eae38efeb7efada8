package sim

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/launchdarkly/eventsource"
)

// FuzzSSEWriter writes arbitrary id, event name and data with appendEvent and decodes the result with the
// client library the bridge uses: exactly one event must come back, its data equal to the input with
// CRLF and CR turned into LF, its id and name equal to the input without CR and LF (an id with a NUL is
// ignored by the decoder, as the SSE specification requires).
func FuzzSSEWriter(f *testing.F) {
	f.Add("ev-0000000000000001", "GATE_IN", []byte(`{"type":"GATE_IN"}`))
	f.Add("", "", []byte(""))
	f.Add(" lead", " name", []byte(" leading space\n"))
	f.Add("a\r\nb", "x\ny", []byte("a\r\nb\rc\nd\r"))
	f.Add("nul\x00", "e", []byte("\n\n\n"))
	f.Add("id: x", "data: y", []byte("data: z\n\nid: w\n: comment\nretry: 5"))
	f.Add("é", "ü", []byte{0xff, 0xfe, '\r', 0, '\n'})
	f.Fuzz(func(t *testing.T, id, event string, data []byte) {
		msg := appendEvent(nil, id, event, data)
		dec := eventsource.NewDecoder(bytes.NewReader(msg))
		ev, err := dec.Decode()
		if err != nil {
			t.Fatalf("decode %q: %v", msg, err)
		}
		want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(data))
		if ev.Data() != want {
			t.Errorf("data %q, want %q (message %q)", ev.Data(), want, msg)
		}
		wantID := stripLineBreaks(id)
		if strings.ContainsRune(wantID, 0) {
			wantID = ""
		}
		if ev.Id() != wantID {
			t.Errorf("id %q, want %q", ev.Id(), wantID)
		}
		if ev.Event() != stripLineBreaks(event) {
			t.Errorf("event %q, want %q", ev.Event(), stripLineBreaks(event))
		}
		if ev, err := dec.Decode(); err != io.EOF {
			t.Errorf("a second message %v (%v) from %q", ev, err, msg)
		}
	})
}

func TestAppendEventFormat(t *testing.T) {
	tests := []struct {
		id, event, data, want string
	}{
		{"ev-1", "GATE_IN", "{}", "id: ev-1\nevent: GATE_IN\ndata: {}\n\n"},
		{"", "", "", "data: \n\n"},
		{"", "", "a\r\nb\rc\nd", "data: a\ndata: b\ndata: c\ndata: d\n\n"},
		{"", "", "x\n", "data: x\ndata: \n\n"},
		{"a\nb", "c\r", "y", "id: ab\nevent: c\ndata: y\n\n"},
		{"\n", "", "y", "data: y\n\n"},
	}
	for _, tt := range tests {
		if got := string(appendEvent(nil, tt.id, tt.event, []byte(tt.data))); got != tt.want {
			t.Errorf("appendEvent(%q, %q, %q) = %q, want %q", tt.id, tt.event, tt.data, got, tt.want)
		}
	}
}

func TestGeneratedMessageMatchesWriter(t *testing.T) {
	g := newGenerator("demo", 700, seedLocations(), idPrefix)
	ts := time.Date(2025, 3, 14, 10, 0, 0, 123_000_000, time.UTC)
	for k := int64(0); k < 200; k++ {
		seq := k*3 + 1
		data := g.appendData(nil, seq, k, ts)
		want := appendEvent(nil, EventID(int(seq)), g.name(k), data)
		if got := g.appendMessage(nil, seq, k, ts); !bytes.Equal(got, want) {
			t.Fatalf("k=%d: %q, want %q", k, got, want)
		}
	}
}

func TestEventID(t *testing.T) {
	if got := EventID(42); got != "ev-0000000000000042" {
		t.Errorf("EventID(42) = %q", got)
	}
	prev := ""
	for _, seq := range []int{1, 9, 10, 99, 100, 123456789, 1 << 40} {
		id := EventID(seq)
		if id <= prev {
			t.Errorf("%q does not sort after %q", id, prev)
		}
		if n, ok := idForm(idPrefix).parse(id); !ok || n != int64(seq) {
			t.Errorf("parse(%q) = %d, %v", id, n, ok)
		}
		prev = id
	}
	for _, bad := range []string{"", "ev-", "ev-x", "ev--1", "ev-+1", "ev-0", "x-1"} {
		if _, ok := idForm(idPrefix).parse(bad); ok {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
	tagged := newIDForm("r1")
	if got := tagged.id(42); got != "ev-r1-0000000000000042" {
		t.Errorf("tagged id(42) = %q", got)
	}
	if n, ok := tagged.parse("ev-r1-0000000000000042"); !ok || n != 42 {
		t.Errorf("tagged parse = %d, %v", n, ok)
	}
	for _, other := range []string{EventID(42), "ev-r2-0000000000000042"} {
		if _, ok := tagged.parse(other); ok {
			t.Errorf("an id of another run, %q, parsed as this run's", other)
		}
	}
}

// TestIDTagSeparatesRuns: with an IDTag, a simulator's events carry it in their ids (SSE id and data), a
// Last-Event-ID of another run is unknown (the stream replays from the start), and one of its own run
// resumes after it.
func TestIDTagSeparatesRuns(t *testing.T) {
	e := newEnv(t, Options{IDTag: "run2", EventRate: -1, EventLimit: 3})
	tok := e.login("demo")
	rd := newSSEReader(t, e.openStream(tok, ""))
	for seq := 1; seq <= 3; seq++ {
		ev := rd.next()
		want := fmt.Sprintf("ev-run2-%016d", seq)
		if ev.Id() != want || !strings.Contains(ev.Data(), `"id":"`+want+`"`) {
			t.Fatalf("event %d: id %q, data %s; want %s", seq, ev.Id(), ev.Data(), want)
		}
	}
	if ev := newSSEReader(t, e.openStream(tok, EventID(2))).next(); ev.Id() != "ev-run2-0000000000000001" {
		t.Errorf("after another run's id: first event %q, want a replay from the start", ev.Id())
	}
	if ev := newSSEReader(t, e.openStream(tok, "ev-run2-0000000000000002")).next(); ev.Id() != "ev-run2-0000000000000003" {
		t.Errorf("after this run's id 2: first event %q, want 3", ev.Id())
	}
}
