package upstream

// The event is the unit the stream reader hands the event path (internal/publish): one Server-Sent
// Events message as received, before any interpretation of its data. The NATS side imports this package
// for it; this package imports nothing of NATS.

import "time"

// Event is one SSE message of the tracking stream.
type Event struct {
	// ID is the message's own `id:` field; empty when the message carried none.
	ID string
	// ResumeID is the stream's last event id after this message (the value a client sends as
	// Last-Event-ID to resume right after it). It equals ID when the message carried one.
	ResumeID string
	// Name is the `event:` field.
	Name string
	// Data is the `data:` payload, lines joined with "\n". It is read-only: it may share its memory with
	// an immutable string.
	Data []byte
	// Oversize is non-zero when the message exceeded the configured size bound, or had more than
	// MaxLines lines (then ManyLines is set): it is the number of bytes the message had, and Data is
	// empty. Such a message is dead-lettered, never published.
	Oversize  int
	ManyLines bool
	// Slow is non-zero when the message did not end within this time bound (see
	// upstream.StreamConfig.MaxEventTime): it was cut, Oversize is the number of bytes it had so far, and
	// Data is empty.
	Slow time.Duration
}

// MaxLines bounds the lines, comments aside, of one SSE message. The SSE decoder copies the data
// gathered so far at every data line, so its work grows with a message's size times its lines; a
// pretty-printed tracking event has a few dozen. Measurements: docs/performance.md.
const MaxLines = 1000

// MaxResumableID is the longest id sent back as Last-Event-ID. HTTP servers commonly refuse request
// headers beyond a few KiB (431), which would stall the stream at every reconnect; and a longer id
// travels in NATS headers as its digest (publish.MaxHeaderID), so a restart could not read it back.
const MaxResumableID = 1024

// Resumable reports whether id can be sent back as Last-Event-ID to resume after it. Go's HTTP client
// refuses a header value with control characters other than tab, both ends trim leading and trailing
// space and tab (RFC 9110 5.5), and an id longer than MaxResumableID is not sent. The empty id (no
// Last-Event-ID) is resumable.
func Resumable(id string) bool {
	if len(id) > MaxResumableID {
		return false
	}
	if id != "" && (id[0] == ' ' || id[0] == '\t' || id[len(id)-1] == ' ' || id[len(id)-1] == '\t') {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
