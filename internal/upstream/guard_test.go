package upstream

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/launchdarkly/eventsource"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
)

type got struct {
	id, name, data string
	oversize       int
	manyLines      bool
	empty          bool // the message's one data line has an empty value: the guard marked it
}

// decodeAll runs input through a guard and eventsource's decoder and returns the events.
func decodeAll(t testing.TB, input string, maxBytes int, oneByte bool) []got {
	t.Helper()
	var r io.Reader = strings.NewReader(input)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	g := newGuard(io.NopCloser(r), maxBytes, 0)
	dec := eventsource.NewDecoder(g)
	var out []got
	for {
		e, err := dec.Decode()
		if err != nil {
			return out
		}
		ev := got{id: e.Id(), name: e.Event(), data: e.Data()}
		if n, why, ok := parseOversize(ev.name); ok {
			ev = got{id: ev.id, oversize: n, manyLines: why == cutLines}
		}
		if ev.data == emptyData {
			ev.data, ev.empty = "", true
		}
		out = append(out, ev)
	}
}

func TestGuardBoundsMessages(t *testing.T) {
	big := strings.Repeat("x", 300)
	tests := []struct {
		name  string
		input string
		max   int
		want  []got
	}{
		{"small events pass", "id: 1\ndata: {\"a\":1}\n\nid: 2\ndata: b\n\n", 100,
			[]got{{id: "1", data: `{"a":1}`}, {id: "2", data: "b"}}},
		{"oversize between small ones", "id: 1\ndata: a\n\nid: 2\ndata: " + big + "\n\nid: 3\ndata: c\n\n", 100,
			[]got{{id: "1", data: "a"}, {id: "2", oversize: 6 + 307 + 1}, {id: "3", data: "c"}}},
		{"oversize over many lines", "id: 9\ndata: " + big + "\ndata: " + big + "\nevent: x\n\nid: 10\ndata: ok\n\n", 50,
			[]got{{id: "9", oversize: 6 + 2*307 + 9 + 1}, {id: "10", data: "ok"}}},
		{"CRLF line ends", "id: 1\r\ndata: a\r\n\r\nid: 2\r\ndata: " + big + "\r\n\r\nid: 3\r\ndata: c\r\n\r\n", 100,
			[]got{{id: "1", data: "a"}, {id: "2", oversize: 6 + 307 + 1}, {id: "3", data: "c"}}},
		{"CR line ends", "id: 1\rdata: a\r\rid: 2\rdata: " + big + "\r\rid: 3\rdata: c\r\r", 100,
			[]got{{id: "1", data: "a"}, {id: "2", oversize: 6 + 307 + 1}, {id: "3", data: "c"}}},
		{"comments reset the count", ": hb\n\n: hb\n\nid: 1\ndata: " + strings.Repeat("y", 80) + "\n\n", 100,
			[]got{{id: "1", data: strings.Repeat("y", 80)}}},
		{"exactly at the bound", "data: " + strings.Repeat("z", 94) + "\n\n", 101,
			[]got{{data: strings.Repeat("z", 94)}}},
		{"lines up to the line bound", "id: 1\n" + lines("data: x", MaxLines-1, "\n") + "\n", 1 << 20,
			[]got{{id: "1", data: strings.TrimSuffix(strings.Repeat("x\n", MaxLines-1), "\n")}}},
		{"a line past the line bound", "id: 2\n" + lines("data: x", MaxLines, "\n") + "\nid: 3\ndata: c\n\n", 1 << 20,
			[]got{{id: "2", oversize: 6 + 8*MaxLines + 1, manyLines: true}, {id: "3", data: "c"}}},
		{"a line past the line bound, CR line ends", lines("data: x", MaxLines+1, "\r") + "\rdata: c\r\r", 1 << 20,
			[]got{{oversize: 8*(MaxLines+1) + 1, manyLines: true}, {data: "c"}}},
		{"comments do not count as lines", lines(": hb", 2*MaxLines, "\n") + "id: 4\ndata: y\n\n", 1 << 20,
			[]got{{id: "4", data: "y"}}},
		{"comments inside a message do not count as lines", "id: 4\n" + lines(": hb", 2*MaxLines, "\n") + "data: y\n\n", 1 << 20,
			[]got{{id: "4", data: "y"}}},
		{"comments do not count toward the size", ": " + strings.Repeat("c", 700) + "\nid: real-1\ndata: " + strings.Repeat("d", 500) + "\n\n", 600,
			[]got{{id: "real-1", data: strings.Repeat("d", 500)}}},
		{"large comment-only blocks are no events", lines(": "+strings.Repeat("c", 300)+"\n", 5, "\n") + "id: 6\ndata: z\n\n", 100,
			[]got{{id: "6", data: "z"}}},
		{"a blank line after a comment after a CR ends the message", "data: a\r: c\n\ndata: b\r\r", 100,
			[]got{{data: "a"}, {data: "b"}}},
		{"a comment between CR and LF of nothing", "data: a\r: c\r\n\ndata: b\n\n", 100,
			[]got{{data: "a"}, {data: "b"}}},
		{"a comment between CRLF lines", "data: a\r\n: c\r\ndata: b\r\n\r\n", 100,
			[]got{{data: "a\nb"}}},
		{"the size bound within the line bound", lines("data: xxxxxxxxx", 20, "\n") + "\nid: 5\ndata: c\n\n", 100,
			[]got{{oversize: 16*20 + 1}, {id: "5", data: "c"}}},
		// A data line with an empty value gives an event with empty data, which the decoder does not tell
		// from a message without a data line; the guard marks it.
		{"data: without a value", "id: 1\ndata:\n\nid: 2\ndata: \n\nid: 3\ndata\n\n", 100,
			[]got{{id: "1", empty: true}, {id: "2", empty: true}, {id: "3", empty: true}}},
		{"data: without a value, CRLF and CR line ends", "id: 1\r\ndata:\r\n\r\nid: 2\rdata\r\r", 100,
			[]got{{id: "1", empty: true}, {id: "2", empty: true}}},
		{"data: without a value, other fields after it", "data:\nevent: GATE_IN\nid: 7\n: c\n\n", 100,
			[]got{{id: "7", name: "GATE_IN", empty: true}}},
		{"no data line", "id: 1\n\nevent: x\n\nretry: 5\n\ndatax\n\ndata x\n\n:data\n\n", 100,
			[]got{{id: "1"}, {name: "x"}, {}, {}, {}}},
		{"data: with values", "data:  \n\ndata\ndata\n\ndata:\ndata: x\n\ndata: x\ndata:\n\n", 100,
			[]got{{data: " "}, {data: "\n"}, {data: "\nx"}, {data: "x\n"}}},
		{"data: without a value in an oversize message", "id: 8\ndata:\nevent: " + big + "\n\nid: 9\ndata:\n\n", 100,
			[]got{{id: "8", oversize: 6 + 6 + 308 + 1}, {id: "9", empty: true}}},
	}
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			t.Run(tt.name, func(t *testing.T) {
				got := decodeAll(t, tt.input, tt.max, oneByte)
				if len(got) != len(tt.want) {
					t.Fatalf("got %d events %+v, want %+v", len(got), got, tt.want)
				}
				for i := range got {
					if got[i] != tt.want[i] {
						t.Errorf("event %d = %+v, want %+v", i, got[i], tt.want[i])
					}
				}
			})
		}
	}
}

// TestGuardHugeComment: a 50 MB comment line is skipped in bounded memory, and the event after it
// arrives whole.
func TestGuardHugeComment(t *testing.T) {
	const size = 50 << 20
	body := io.MultiReader(strings.NewReader(": "), io.LimitReader(repeatByte('c'), size),
		strings.NewReader("\nid: after\ndata: x\n\n"))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	dec := eventsource.NewDecoder(newGuard(io.NopCloser(body), 1<<20, 0))
	e, err := dec.Decode()
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if e.Id() != "after" || e.Data() != "x" || e.Event() != "" {
		t.Fatalf("event %q %q %q, want the one after the comment", e.Id(), e.Event(), e.Data())
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/8 {
		t.Fatalf("allocated %d bytes to skip a comment of %d", alloc, size)
	}
}

// repeatByte is an endless reader of one byte.
type repeatByte byte

func (r repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// lines returns n copies of line, each followed by end.
func lines(line string, n int, end string) string { return strings.Repeat(line+end, n) }

// TestGuardIdle: a body that stops sending is closed after the idle timeout and Read fails with ErrIdle.
func TestGuardIdle(t *testing.T) {
	pr, pw := io.Pipe()
	g := newGuard(pr, 1024, 50*time.Millisecond)
	go func() { _, _ = pw.Write([]byte(": hb\n\n")) }()
	buf := make([]byte, 64)
	if n, err := g.Read(buf); err != nil || n == 0 {
		t.Fatalf("first read: %d, %v", n, err)
	}
	start := time.Now()
	_, err := g.Read(buf)
	if !errors.Is(err, ErrIdle) {
		t.Fatalf("err = %v, want ErrIdle", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("idle fired after %v, before the timeout", d)
	}
}

// TestGuardEndlessComment: a comment line that never ends, trickling a byte well within the idle timeout,
// fails Read with ErrMessageTime once the time bound of a message has passed, as a message would, and
// hands nothing on; short comment lines between messages count toward no message's bound.
func TestGuardEndlessComment(t *testing.T) {
	for _, tc := range []struct {
		name, first string
		want        error
	}{
		{"endless", ": ", ErrMessageTime},
		{"heartbeats", ": hb\n", io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			g := newGuard(pr, 1<<20, 2*time.Second)
			g.maxTime = 300 * time.Millisecond
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for range 40 { // 40 writes 25 ms apart: a second, past the bound, within the idle timeout each
					if _, err := pw.Write([]byte(tc.first)); err != nil {
						return
					}
					if tc.first == ": " {
						tc.first = "a"
					}
					select {
					case <-stop:
						return
					case <-time.After(25 * time.Millisecond):
					}
				}
				_ = pw.Close()
			}()
			out, err := io.ReadAll(io.LimitReader(readerFunc(g.Read), 1<<20))
			if err == nil {
				err = io.EOF
			}
			if !errors.Is(err, tc.want) || len(out) != 0 {
				t.Errorf("read %q, %v; want nothing and %v", out, err, tc.want)
			}
		})
	}
}

// readerFunc adapts a Read method to io.Reader, so that io.ReadAll reports its error.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// FuzzGuard: on input whose messages fit the bounds the guard changes no event and marks exactly those
// whose one data line is empty, it never hands the decoder a comment, a line longer than the size bound or
// a message of more lines than the line bound, and it never fails on any input.
func FuzzGuard(f *testing.F) {
	f.Add([]byte("id: 1\ndata: {}\n\n"), 8)
	f.Add([]byte("id: 1\r\ndata: aaaaaaaaaaaaaaaaaaa\r\n\r\n: c\r\rdata: b\n\n"), 5)
	f.Add([]byte("data: x\r\n\r\ndata: \r\n"), 3)
	f.Add([]byte("data: a\r: c\n\ndata: b\r: d\r\n\n"), 64)
	f.Add([]byte("id: 1\ndata:\n\ndata\r\rdata: \r\n: c\r\n\r\ndata\ndata\n\nid: 2\n\n"), 64)
	f.Fuzz(func(t *testing.T, in []byte, maxBytes int) {
		if maxBytes <= 0 || maxBytes > 1<<16 {
			maxBytes = 16
		}
		g := newGuard(io.NopCloser(iotest.HalfReader(bytes.NewReader(in))), maxBytes, 0)
		g.maxLines = 1 + maxBytes%7 // small, so that fuzzing reaches the line bound too
		out, err := io.ReadAll(g)
		if err != nil {
			t.Fatal(err)
		}
		if longestMessage(in) <= maxBytes && mostLines(in) <= g.maxLines {
			want := decodeRaw(in)
			empty := emptyDataFlags(in)
			if len(empty) != len(want) {
				t.Fatalf("the reference finds %d events in %q, the decoder %d", len(empty), in, len(want))
			}
			for i := range want {
				want[i].empty = empty[i]
			}
			if got := decodeRaw(out); !slices.Equal(got, want) {
				t.Fatalf("changed events of input that fits the bound:\n in %q\nout %q\nwant %+v\n got %+v", in, out, want, got)
			}
		}
		if n := mostLines(out); n > g.maxLines+1 { // +1: the marker's own event: line
			t.Fatalf("message of %d lines passed a bound of %d:\n in %q\nout %q", n, g.maxLines, in, out)
		}
		for _, line := range bytes.FieldsFunc(out, func(r rune) bool { return r == '\n' || r == '\r' }) {
			if line[0] == ':' {
				t.Fatalf("comment line %q passed:\n in %q\nout %q", line, in, out)
			}
			if len(line) > maxBytes+1 && !bytes.Contains(line, []byte(oversizeMarker)) && // +1: the NUL ending a cut line
				!bytes.Equal(line, []byte("data:"+emptyDataMarker)) {
				t.Fatalf("line of %d bytes passed a bound of %d", len(line), maxBytes)
			}
		}
	})
}

// decodeRaw returns the events eventsource's decoder reads from in, without a guard, as id/name/data
// triples; data marked by the guard as empty reads "" with empty set.
func decodeRaw(in []byte) []got {
	dec := eventsource.NewDecoder(bytes.NewReader(in))
	var out []got
	for {
		e, err := dec.Decode()
		if err != nil {
			return out
		}
		ev := got{id: e.Id(), name: e.Event(), data: e.Data()}
		if ev.data == emptyData {
			ev.data, ev.empty = "", true
		}
		out = append(out, ev)
	}
}

// emptyDataFlags is a reference for the guard's marks: for each event an SSE decoder reads from in (a
// message of at least one line other than comments, ended by a blank line), whether the message has one
// data line and its value is empty.
func emptyDataFlags(in []byte) []bool {
	norm := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(in))
	var flags []bool
	fields, data, empty := 0, 0, false
	for _, l := range strings.SplitAfter(norm, "\n") {
		line, ok := strings.CutSuffix(l, "\n")
		switch {
		case !ok: // a last line without its end: the stream ends within the message, which is no event
		case line == "":
			if fields > 0 {
				flags = append(flags, data == 1 && empty)
			}
			fields, data = 0, 0
		case line[0] == ':':
		default:
			fields++
			if name, value, _ := strings.Cut(line, ":"); name == "data" {
				if data++; data == 1 {
					empty = strings.TrimPrefix(value, " ") == ""
				}
			}
		}
	}
	return flags
}

// longestMessage returns the size of the longest message in an SSE byte stream, counted as the guard
// counts it (bytes between blank lines, comments aside, each line end as one byte).
func longestMessage(in []byte) int {
	longest := 0
	for _, msg := range strings.Split(withoutComments(in), "\n\n") {
		longest = max(longest, len(msg)+1)
	}
	return longest
}

// withoutComments returns an SSE byte stream with its line ends as LF and its comment lines removed.
func withoutComments(in []byte) string {
	norm := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(in))
	lines := strings.SplitAfter(norm, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(l, ":") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "")
}

// mostLines returns the largest number of lines other than comments in one message of an SSE byte stream.
func mostLines(in []byte) int {
	norm := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(in))
	most := 0
	for _, msg := range strings.Split(norm, "\n\n") {
		n := 0
		for _, line := range strings.Split(msg, "\n") {
			if line != "" && line[0] != ':' {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// FuzzSSERoundTrip: arbitrary event payloads written by the simulator's SSE writer come out of the
// bridge's reader (guard + decoder) intact, with CR and CRLF read as LF as SSE requires, or, when larger
// than the bound, as an oversize marker with the right id; the event after them is never disturbed.
func FuzzSSERoundTrip(f *testing.F) {
	f.Add("ev-1", []byte(`{"type":"GATE_IN"}`), 64)
	f.Add("ev-2", []byte("line1\r\nline2\rline3\n"), 8)
	f.Add("", []byte(""), 16)
	f.Add("ev-3", []byte(":not a comment\n\ndata: x"), 1000)
	f.Fuzz(func(t *testing.T, id string, data []byte, maxBytes int) {
		if maxBytes <= 0 || maxBytes > 1<<16 {
			maxBytes = 64
		}
		stream := sim.AppendEvent(nil, id, "GATE_IN", data)
		size := len(stream)
		stream = sim.AppendEvent(stream, "next", "GATE_OUT", []byte("{}"))
		evs := decodeAll(t, string(stream), maxBytes+64, false)
		if len(evs) != 2 {
			t.Fatalf("decoded %d events from %q", len(evs), stream)
		}
		wantID := strings.NewReplacer("\r", "", "\n", "").Replace(id)
		if strings.ContainsRune(wantID, 0) {
			wantID = ""
		}
		switch {
		case evs[0].manyLines:
			if n := mostLines(stream[:size]); n <= MaxLines {
				t.Fatalf("event of %d lines marked as over the line bound", n)
			}
		case evs[0].oversize > 0:
			if size <= maxBytes+64 {
				t.Fatalf("event of %d bytes marked oversize under a bound of %d", size, maxBytes+64)
			}
		default:
			want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(data))
			if evs[0].data != want || evs[0].empty != (len(data) == 0) {
				t.Fatalf("data %q (empty data line %v), want %q", evs[0].data, evs[0].empty, want)
			}
		}
		if evs[0].id != wantID && !(evs[0].oversize > 0 && len("id: "+wantID) >= maxBytes+64) {
			t.Fatalf("id %q, want %q", evs[0].id, wantID)
		}
		if evs[1] != (got{id: "next", name: "GATE_OUT", data: "{}"}) {
			t.Fatalf("following event disturbed: %+v", evs[1])
		}
	})
}
