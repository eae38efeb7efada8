package upstream

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ErrIdle is the cause recorded when the stream delivered no byte, heartbeats included, for the idle
// timeout while the reader was waiting for one.
var ErrIdle = errors.New("no data or heartbeat within the idle timeout")

// ErrMessageTime is the cause recorded when a message begun did not end within the time bound of one
// message (StreamConfig.MaxEventTime): an upstream sending data lines forever without the blank line, or
// one line slowly, would otherwise hold the stream connected without an event.
var ErrMessageTime = errors.New("an SSE message did not end within the time bound of one message")

// markerNonce is random, so that no upstream message can pass for one the guard marked.
var markerNonce = func() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// oversizeMarker is the SSE event name the guard gives to a message it cut short.
var oversizeMarker = "bridge-oversize-" + markerNonce + ":"

// emptyDataMarker is the value of the data line the guard adds to a message whose one data line has an
// empty value (`data:`, `data: ` or `data`). The SSE model dispatches such a message as an event with empty
// data, and a message without a data line as none; the decoder gives both the data "" and tells them apart
// nowhere. With the line added the first reads "\n" + emptyDataMarker (emptyData). A message with more
// data lines needs none: its data holds their line feeds.
var emptyDataMarker = "bridge-empty-data-" + markerNonce

// emptyData is the data the decoder gives a message marked with emptyDataMarker.
var emptyData = "\n" + emptyDataMarker

// manyLinesSuffix ends the marker of a message cut for its number of lines rather than its size, and
// slowSuffix that of a message cut because it did not end in time.
const (
	manyLinesSuffix = ":lines"
	slowSuffix      = ":slow"
)

// cut is why the guard cut a message.
type cut int

const (
	cutSize  cut = iota // larger than the size bound
	cutLines            // more lines than the line bound
	cutSlow             // not ended within the time bound
)

// parseOversize reports whether an SSE event name is the guard's marker, the message size it carries,
// and why the message was cut.
func parseOversize(name string) (size int, why cut, ok bool) {
	rest, ok := strings.CutPrefix(name, oversizeMarker)
	if !ok {
		return 0, 0, false
	}
	if r, lines := strings.CutSuffix(rest, manyLinesSuffix); lines {
		rest, why = r, cutLines
	} else if r, slow := strings.CutSuffix(rest, slowSuffix); slow {
		rest, why = r, cutSlow
	}
	n, err := strconv.Atoi(rest)
	return n, why, err == nil
}

// guard sits between the HTTP response body and the SSE decoder. It bounds the memory one message can
// take and detects a silent connection:
//
//   - A message (the bytes between two blank lines) longer than max is cut: the bytes past the bound are
//     dropped up to the message's end, and the message is closed with an `event:` line naming the
//     oversizeMarker and the message's full size, so the reader can dead-letter it. The decoder never
//     buffers more than max bytes plus one read.
//   - Comment lines are dropped before anything else (see strip): they count toward no bound of size or
//     lines. A comment line that does not end within maxTime (none is that long: heartbeats are short) fails
//     Read with ErrMessageTime, as a message would, with nothing to cut.
//   - A message of more than maxLines lines is cut the same way, before its first
//     line past the bound, and its marker ends in manyLinesSuffix: the decoder's work on one message
//     grows with its size times its lines (see MaxLines).
//   - When a Read has waited idle for a byte, the body is closed and Read fails with ErrIdle. Time spent
//     outside Read (the bridge applying backpressure) does not count.
//   - A message not ended within maxTime of waiting for its bytes (from its first byte on; time outside
//     Read does not count either) is cut: the message is closed at once with the marker, its size so far
//     and slowSuffix, and then Read fails with ErrMessageTime, so the stream reconnects and resumes after
//     what was stored. Bytes that trickle in, each within the idle timeout, cannot hold the stream
//     without an event for longer.
//   - A message whose one data line has an empty value gets a second data line, emptyDataMarker, before
//     its blank line, so that the reader can tell it from a message without data.
//
// Line ends are LF, CR or CRLF, as in the SSE specification.
type guard struct {
	src      io.ReadCloser
	max      int
	maxLines int
	idle     time.Duration
	maxTime  time.Duration // the time bound of one message; 0: none

	timer     *time.Timer   // the watchdog of one read: closes the body when it fires
	armed     atomic.Int32  // what the watchdog was set for: watchIdle or watchMessage
	fired     atomic.Int32  // what it fired for; 0 until it did
	waited    time.Duration // spent in the body's Read on the current message, for maxTime
	size      int           // bytes of the current message so far
	lines     int           // lines of the current message so far
	manyLines bool          // the message being dropped was cut for its lines
	bol       bool          // at the beginning of a line
	lastCR    bool          // the previous byte was CR (a following LF belongs to it)
	skip      bool          // dropping the rest of an oversize message
	carry     []byte
	pend      []byte
	err       error // sticky error from the body, returned once carry and pend are drained

	// The data lines of the current message, for emptyDataMarker.
	head      [len("data: ")]byte // the current line's first bytes
	lineLen   int                 // the current line's length so far
	dataLines int                 // the message's data lines, counted up to 2
	emptyData bool                // the message's first data line has an empty value
	markEmpty bool                // scan stopped at the blank line of a message to mark

	// Comment stripping, over the raw input (see strip).
	rawBOL    bool // the raw input is at the beginning of a line
	comment   bool // dropping a comment line
	commentCR bool // a dropped comment line ended with CR: a following LF belongs to it
	afterCR   bool // the last byte handed on is a CR and comments were dropped after it
	keptCR    bool // the last byte handed on is a CR
}

// What the watchdog of a read is set for.
const (
	watchIdle    = 1 // the idle timeout
	watchMessage = 2 // the rest of the message's time bound
)

// newGuard returns a guard of src bounding each message to maxBytes and MaxLines lines, and the
// wait for a byte to idle (0: none). Its time bound per message, maxTime, is set after it, 0 for none.
func newGuard(src io.ReadCloser, maxBytes int, idle time.Duration) *guard {
	g := &guard{src: src, max: maxBytes, maxLines: MaxLines, idle: idle, bol: true, rawBOL: true}
	g.timer = time.AfterFunc(time.Hour, func() {
		g.fired.Store(g.armed.Load())
		_ = src.Close()
	})
	g.timer.Stop()
	return g
}

// Close closes the body and stops the watchdog.
func (g *guard) Close() error {
	g.timer.Stop()
	return g.src.Close()
}

// Read implements io.Reader.
func (g *guard) Read(p []byte) (int, error) {
	for {
		if len(g.pend) > 0 {
			n := copy(p, g.pend)
			g.pend = g.pend[n:]
			return n, nil
		}
		var n int
		switch {
		case len(g.carry) > 0:
			n = copy(p, g.carry)
			g.carry = g.carry[n:]
		case g.err != nil:
			return 0, g.err
		default:
			n, g.err = g.read(p)
			if errors.Is(g.err, ErrMessageTime) {
				if g.size == 0 && !g.skip {
					// A comment line that did not end: nothing to cut, the stream reconnects.
					return 0, g.err
				}
				g.cutSlow() // what came with the error belongs to the message cut
				continue
			}
			n = g.strip(p[:n])
			if n == 0 {
				if g.err == nil {
					continue
				}
				return 0, g.err
			}
		}
		if out := g.filter(p[:n]); out > 0 {
			return out, nil
		}
	}
}

// read reads from the body under the watchdog: the idle timeout, or the rest of the time bound of the
// message begun when that is shorter. The time it waits counts toward that message's bound.
func (g *guard) read(p []byte) (int, error) {
	open := g.maxTime > 0 && (g.size > 0 || g.skip || g.comment)
	wait, watch := g.idle, int32(watchIdle)
	if open {
		left := g.maxTime - g.waited
		if left <= 0 {
			return 0, ErrMessageTime
		}
		if wait <= 0 || left < wait {
			wait, watch = left, watchMessage
		}
	}
	if wait > 0 {
		g.armed.Store(watch)
		g.timer.Reset(wait)
	}
	start := time.Now()
	n, err := g.src.Read(p)
	if wait > 0 {
		g.timer.Stop()
	}
	if open {
		g.waited += time.Since(start)
	}
	if err != nil {
		switch g.fired.Load() {
		case watchIdle:
			err = ErrIdle
		case watchMessage:
			err = ErrMessageTime
		}
	}
	return n, err
}

// cutSlow closes the message begun, which did not end within the time bound, with the marker: what of it
// the decoder has is dropped, as an oversize message's is. Read then fails with ErrMessageTime: the rest
// of the message may never come.
func (g *guard) cutSlow() {
	g.pend = g.pend[:0]
	if !g.bol {
		g.pend = append(g.pend, 0, '\n') // as filter ends a cut line
	}
	g.pend = append(g.pend, "event:"+oversizeMarker+strconv.Itoa(g.size)+slowSuffix+"\n\n"...)
	g.carry = nil
	g.skip, g.size, g.lines, g.manyLines, g.waited = false, 0, 0, false, 0
	g.bol, g.lineLen, g.dataLines = true, 0, 0
}

// strip removes comment lines (those beginning with ':'), line ends included, from freshly read input b in
// place and returns the length of what remains. The SSE decoder ignores comments, so dropping them changes
// no event; dropping them here means a comment never counts toward a message's bounds, never turns a
// message into a dead letter, and is never buffered whatever its length. Heartbeats are counted before
// the guard, on the raw reads.
func (g *guard) strip(b []byte) int {
	w := 0
	for i := 0; i < len(b); {
		if g.commentCR {
			g.commentCR = false
			if b[i] == '\n' {
				i++
				continue
			}
		}
		if !g.comment && g.rawBOL && b[i] == ':' {
			g.comment, g.afterCR = true, g.afterCR || g.keptCR
		}
		end := lineEnd(b[i:])
		if g.comment {
			if end < 0 {
				return w // the comment goes on in the next read
			}
			g.comment, g.rawBOL, g.commentCR = false, true, b[i+end] == '\r'
			if g.size == 0 && !g.skip {
				g.waited = 0 // a comment line between messages: its time counts toward no message
			}
			i += end + 1
			continue
		}
		n := len(b) - i
		if end >= 0 {
			n = end + 1
		}
		if g.afterCR && b[i] == '\n' {
			// After a CR that ended a line, an LF would read as the second half of a CRLF, although the
			// comments between them made it a line end of its own (a blank line, which ends a message).
			b[i] = '\r'
		}
		if w != i {
			copy(b[w:], b[i:i+n])
		}
		w += n
		i += n
		g.rawBOL, g.afterCR, g.keptCR = end >= 0, false, b[w-1] == '\r'
	}
	return w
}

// lineEnd returns the index of the first CR or LF in b, or -1.
func lineEnd(b []byte) int {
	j := bytes.IndexByte(b, '\n')
	if j < 0 {
		j = len(b)
	}
	if k := bytes.IndexByte(b[:j], '\r'); k >= 0 {
		return k
	}
	if j == len(b) {
		return -1
	}
	return j
}

// filter tracks message boundaries over b (in place) and returns how many bytes of b to hand on. Bytes it
// holds back for later are kept in carry, text it adds in pend.
func (g *guard) filter(b []byte) int {
	for i := 0; i < len(b); {
		if g.skip {
			end, ok := g.scan(b[i:], true)
			if !ok {
				return i
			}
			// The oversize message ended: close it with the marker, then go on with the rest.
			marker := oversizeMarker + strconv.Itoa(g.size)
			if g.manyLines {
				marker += manyLinesSuffix
			}
			g.pend = append(g.pend[:0], "event:"+marker+"\n\n"...)
			g.skip, g.size, g.lines, g.manyLines, g.waited = false, 0, 0, false, 0
			g.lineLen, g.dataLines = 0, 0
			g.hold(b[i+end:])
			return i
		}
		end, ok := g.scan(b[i:], false)
		if ok {
			i += end
			continue
		}
		if g.markEmpty {
			// The blank line at i+end ends a message whose one data line is empty: add the marker's line
			// before it. scan left the state as before that blank line, which comes again from carry.
			g.markEmpty = false
			g.pend = append(g.pend[:0], "data:"+emptyDataMarker+"\n"...)
			g.hold(b[i+end:])
			return i + end
		}
		// The bound was reached at i+end: hand on what came before, drop the rest of the message.
		cut := i + end
		g.skip = true
		if !g.bol {
			// End the cut line with NUL: an SSE decoder ignores an id containing NUL, and a retry value
			// with it does not parse, so a truncated id or retry never takes effect. A cut data or
			// event line does not matter: the marker replaces the message.
			g.pend = append(g.pend[:0], 0, '\n')
			g.bol = true
		}
		g.hold(b[cut:])
		return cut
	}
	return len(b)
}

// endLine counts the line that just ended if it is a data line: its field name is "data", followed by a
// colon or nothing (the decoder reads fields so). Its value is empty when nothing or one space follows
// the colon.
func (g *guard) endLine() {
	h := g.head[:min(g.lineLen, len(g.head))]
	if g.lineLen == len("data") && string(h) == "data" || g.lineLen > len("data") && string(h[:5]) == "data:" {
		if g.dataLines == 0 {
			g.emptyData = g.lineLen <= len("data:") || g.lineLen == len("data: ") && h[5] == ' '
		}
		g.dataLines = min(g.dataLines+1, 2)
	}
	g.lineLen = 0
}

// hold puts b back in front of the input not yet filtered. It runs only around oversize messages and those
// marked with emptyDataMarker.
func (g *guard) hold(b []byte) {
	g.carry = append(append(make([]byte, 0, len(b)+len(g.carry)), b...), g.carry...)
}

// scan advances the message state over b. Without skip it stops (ok=false) at the byte where the message
// would exceed the bound, or (setting markEmpty) at the blank line of a message to mark with
// emptyDataMarker; with skip it stops (ok=true) just after the blank line that ends the message.
// Otherwise it consumes all of b and returns ok=!skip.
func (g *guard) scan(b []byte, skip bool) (int, bool) {
	i := 0
	for i < len(b) {
		// Find the next line end.
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			j = len(b) - i
		}
		if k := bytes.IndexByte(b[i:i+j], '\r'); k >= 0 {
			j = k
		}
		if j > 0 { // j ordinary bytes
			if g.bol && !skip {
				if g.lines == g.maxLines { // a line past the bound begins: cut before it
					g.manyLines = true
					return i, false
				}
				g.lines++
			}
			if !skip && g.size+j > g.max {
				cut := i + g.max - g.size
				if g.max > g.size {
					g.bol, g.lastCR = false, false
				}
				g.size = g.max
				return cut, false
			}
			if !skip {
				if g.lineLen < len(g.head) {
					copy(g.head[g.lineLen:], b[i:i+j])
				}
				g.lineLen += j
			}
			g.size += j
			g.bol, g.lastCR = false, false
			i += j
			if i == len(b) {
				break
			}
		}
		c := b[i]
		if c == '\n' && g.lastCR {
			i++
			g.lastCR = false
			continue // the LF of a CRLF
		}
		if g.bol && !skip && g.dataLines == 1 && g.emptyData {
			g.dataLines, g.markEmpty = 0, true
			return i, false
		}
		i++
		g.lastCR = c == '\r'
		if g.bol { // a blank line: the message ends
			if skip {
				g.size++
				return i, true
			}
			g.size, g.lines, g.dataLines, g.waited = 0, 0, 0, 0
			continue
		}
		g.bol = true
		if !skip {
			g.endLine()
		}
		g.size++
		if !skip && g.size > g.max {
			// The line end itself crosses the bound; let it through (it ends the line) and cut after it.
			return i, false
		}
	}
	return i, !skip
}
