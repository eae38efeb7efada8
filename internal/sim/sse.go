package sim

import (
	"bytes"
	"strconv"
	"strings"
	"time"
)

// idPrefix and idDigits shape the ids the simulator assigns: "ev-", the run tag and "-" when
// Options.IDTag is set, then the log sequence number zero-padded to 16 digits, so that ids of one user
// sort as strings in log order.
const (
	idPrefix = "ev-"
	idDigits = 16
)

// idForm is the part of a simulator's event ids before the sequence number: "ev-" or "ev-<tag>-".
type idForm string

// RunTag returns an IDTag that differs between runs started at least a second apart: the time in
// base 36.
func RunTag() string { return strconv.FormatInt(time.Now().Unix(), 36) }

func newIDForm(tag string) idForm {
	if tag == "" {
		return idPrefix
	}
	return idForm(idPrefix + tag + "-")
}

// EventID returns the SSE id of the entry with sequence number seq (1-based) in a user's event log of a
// simulator without an IDTag: "ev-" followed by seq zero-padded to 16 digits, e.g. EventID(42) ==
// "ev-0000000000000042".
func EventID(seq int) string { return newIDForm("").id(int64(seq)) }

// id returns the id of the entry with sequence number seq.
func (f idForm) id(seq int64) string {
	return string(f.append(make([]byte, 0, len(f)+idDigits), seq))
}

// append appends the id of seq to dst without allocating.
func (f idForm) append(dst []byte, seq int64) []byte {
	dst = append(dst, f...)
	var digits [20]byte
	b := strconv.AppendInt(digits[:0], seq, 10)
	for i := len(b); i < idDigits; i++ {
		dst = append(dst, '0')
	}
	return append(dst, b...)
}

// parse returns the sequence number of an id of this form.
func (f idForm) parse(id string) (int64, bool) {
	digits, ok := strings.CutPrefix(id, string(f))
	if !ok || digits == "" || digits[0] == '+' || digits[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil && n > 0
}

// heartbeat is the keep-alive comment written on an idle stream.
const heartbeat = ": keep-alive\n\n"

// appendEvent appends one Server-Sent Events message to dst and returns the extended slice. The id: and
// event: lines are written when not empty, with CR and LF removed (a field value cannot carry them; a NUL
// in the id is kept, and clients then ignore the id as the SSE specification requires). data becomes one
// data: line per line, split at CRLF, CR and LF (a decoder returns every break as LF), at least one;
// every value follows "field: " so that a leading space survives, and a blank line ends the message.
func appendEvent(dst []byte, id, event string, data []byte) []byte {
	if id = stripLineBreaks(id); id != "" {
		dst = append(dst, "id: "...)
		dst = append(dst, id...)
		dst = append(dst, '\n')
	}
	if event = stripLineBreaks(event); event != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, event...)
		dst = append(dst, '\n')
	}
	for {
		dst = append(dst, "data: "...)
		i := lineBreak(data)
		if i < 0 {
			dst = append(dst, data...)
			break
		}
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	return append(dst, '\n', '\n')
}

// lineBreak returns the index of the first CR or LF in b, or -1.
func lineBreak(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	search := b
	if lf >= 0 {
		search = b[:lf]
	}
	if cr := bytes.IndexByte(search, '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// stripLineBreaks removes CR and LF from s.
func stripLineBreaks(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.NewReplacer("\r", "", "\n", "").Replace(s)
}

// AppendEvent appends one SSE message as the simulator writes it to dst: an id: line unless id is empty,
// an event: line unless event is empty, and data split into data: lines at every CR, LF or CRLF, then
// the blank line. Tests use it to drive a reader with exactly the simulator's encoding.
func AppendEvent(dst []byte, id, event string, data []byte) []byte {
	return appendEvent(dst, id, event, data)
}
