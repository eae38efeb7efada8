package upstream

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The tests here hold the stream reader to the SSE processing model (WHATWG HTML, "Server-sent events"),
// over real HTTP.

// ssePieces serves the pieces one by one, each flushed, and the next only once the bridge has read from
// the connection (reads counts its reads): the bridge reads them apart. Then it ends the response.
func ssePieces(reads *readCounter, pieces ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, p := range pieces {
			before := reads.reads.Load()
			_, _ = io.WriteString(w, p)
			w.(http.Flusher).Flush()
			for deadline := time.Now().Add(5 * time.Second); reads.reads.Load() == before && time.Now().Before(deadline) &&
				r.Context().Err() == nil; {
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// bytewise splits s into one-byte pieces.
func bytewise(s string) []string {
	out := make([]string, len(s))
	for i := range len(s) {
		out[i] = s[i : i+1]
	}
	return out
}

// readCounter is a StreamObserver that counts the reads from the connection that brought bytes.
type readCounter struct{ reads atomic.Int64 }

func (*readCounter) Connected()          {}
func (*readCounter) Disconnected(string) {}
func (*readCounter) Received(*Event)     {}
func (c *readCounter) Heartbeat()        { c.reads.Add(1) }

// want is an event as the tests expect it: id, name and data.
type want struct{ id, name, data string }

func checkEvents(t *testing.T, got []Event, wants ...want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("got %d events %s, want %d %+v", len(got), describeEvents(got), len(wants), wants)
	}
	for i, w := range wants {
		if e := got[i]; e.ID != w.id || e.Name != w.name || string(e.Data) != w.data {
			t.Errorf("event %d = %s, want %+v", i, describeEvents(got[i:i+1]), w)
		}
	}
}

func describeEvents(evs []Event) string {
	s := ""
	for _, e := range evs {
		s += fmt.Sprintf("{id %q name %q data %q resume %q} ", e.ID, e.Name, e.Data, e.ResumeID)
	}
	return s
}

// TestStreamStripsOneBOM: one byte order mark at the start of a connection's body is stripped, also when
// it arrives one byte per read; a second one stays, and makes the first field's name another (so that
// field is ignored), as the standard says.
func TestStreamStripsOneBOM(t *testing.T) {
	tests := []struct {
		name   string
		pieces []string
		want   []want
	}{
		{"at the start", []string{bom + "event: GATE_IN\nid: 1\ndata: {}\n\n"},
			[]want{{"1", "GATE_IN", "{}"}}},
		{"before a data line", []string{bom + "data: {\"a\":1}\nid: 1\n\n"},
			[]want{{"1", "", `{"a":1}`}}},
		{"split byte by byte", bytewise(bom + "event: GATE_IN\nid: 1\ndata: {}\n\n"),
			[]want{{"1", "GATE_IN", "{}"}}},
		{"only the first", []string{bom + bom + "id: 1\ndata: {\"a\":1}\n\nid: 2\ndata: {}\n\n"},
			[]want{{"", "", `{"a":1}`}, {"2", "", "{}"}}},
		{"only the first, split byte by byte", bytewise(bom + bom + "data: {\"a\":1}\n\nid: 2\ndata: {}\n\n"),
			[]want{{"2", "", "{}"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads := &readCounter{}
			sc, sink, stop := runScriptedWith(t, func(c *StreamConfig) { c.Observer = reads }, ssePieces(reads, tt.pieces...))
			waitAttempts(t, sc, 2) // the body ended: every piece was read
			stop()
			checkEvents(t, sink.snapshot(), tt.want...)
			if n := reads.reads.Load(); n < int64(len(tt.pieces)) {
				t.Errorf("the body came in %d reads, want at least %d: the pieces were not read apart", n, len(tt.pieces))
			}
		})
	}
}

// TestStreamEmptyData: a data line without a value (`data:`, `data: `, `data`) gives an event with empty
// data, handed on like any other (the publisher dead-letters it as not JSON, with its id); a block
// without a data line gives none.
func TestStreamEmptyData(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("split %v", split), func(t *testing.T) {
			body := "id: 1\ndata:\n\nid: 2\r\ndata: \r\n\r\nid: 3\nevent: GATE_IN\ndata\n\n" +
				"id: 4\nevent: GATE_OUT\n\n: comment\n\nretry: 10\n\nid: 5\ndata: {}\n\n"
			pieces := []string{body}
			if split {
				pieces = bytewise(body)
			}
			reads := &readCounter{}
			sc, sink, stop := runScriptedWith(t, func(c *StreamConfig) { c.Observer = reads }, ssePieces(reads, pieces...))
			waitAttempts(t, sc, 2)
			stop()
			evs := sink.snapshot()
			checkEvents(t, evs, want{"1", "", ""}, want{"2", "", ""}, want{"3", "GATE_IN", ""}, want{"5", "", "{}"})
		})
	}
}

// TestStreamIDOnlyBlock: a block with only an id dispatches no event but sets the last event id, as the
// standard says: an event without an id of its own after it resumes after that id. A reconnect right
// after such a block resumes after the last event handed on instead (the sink's resume point is an event
// it stored); the upstream then replays the block, which costs no event.
func TestStreamIDOnlyBlock(t *testing.T) {
	sc, sink, stop := runScripted(t,
		sse("id: 1\ndata: {}\n\nid: 2\n\ndata: {\"a\":1}\n\n"),
		sse("id: 3\n\n"),
	)
	waitAttempts(t, sc, 3)
	_, ids := sc.seen()
	stop()
	evs := sink.snapshot()
	checkEvents(t, evs, want{"1", "", "{}"}, want{"", "", `{"a":1}`})
	if evs[1].ResumeID != "2" {
		t.Errorf("the event after id: 2 alone resumes after %q, want 2", evs[1].ResumeID)
	}
	if ids[1] != "2" || ids[2] != "2" {
		t.Errorf("Last-Event-ID of the reconnects = %q, want 2 both times", ids[1:3])
	}
}
