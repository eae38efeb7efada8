package publish

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// The first step of Handle: the SSE event as the publisher reads it, before anything is built or sent.

// inbound is an event as read: its data scanned once (ScanEvent, which reads the unit token too), its id
// and type token, and where it sat in the stream. The later steps take everything they need about the event from here.
type inbound struct {
	fields Fields // ScanEvent's result for the data
	err    error  // ScanEvent's error: the data is not a JSON object
	// rawID is the event's id: its SSE id, else its JSON "id", else the digest of its data; id is rawID
	// as it travels in headers (HeaderID), the Nats-Msg-Id under which the event is stored. An oversize
	// event without an SSE id has neither: its data was dropped, and its dead letter is named by the
	// digest of its description.
	rawID, id string
	token     string // the subject's type token (subject.go); "" when the data is not a JSON object
	resumeH   string // the id the upstream resumes after once the event is stored, in header form
	// index is the event's position after resumeH in the stream: 0 for the message that set that id, then
	// 1, 2, ... for the messages without an id of their own after it. It tells apart oversize events of
	// one size without an id.
	index int
}

// streamPos is where the last event read sat in the stream (inbound.index): the resume id it came after
// and how many messages came since the message that set that id.
type streamPos struct {
	id string
	n  int
}

// reset places the next event after id, where the upstream resumes (or starts again).
func (s *streamPos) reset(id string) { s.id, s.n = id, 0 }

// read reads an event: its data is scanned once here, whether the event is then found stored, sent or
// dead-lettered. (The result does not point to ev, which keeps Handle's event off the heap.)
func (p *Publisher) read(ev *upstream.Event) inbound {
	var in inbound
	if ev.ResumeID != p.pos.id {
		// Position 0 is the message that set the id: this one, or a block without data before it (never
		// handed over), which a reconnect after that id would not replay either.
		p.pos.reset(ev.ResumeID)
		if ev.ID != ev.ResumeID {
			p.pos.n = 1
		}
	} else {
		p.pos.n++
	}
	in.index = p.pos.n
	if ev.ResumeID != "" {
		in.resumeH = HeaderID(ev.ResumeID)
	}
	in.fields, in.err = ScanEvent(ev.Data)
	if in.err == nil {
		in.token = TypeToken(in.fields.Type, in.fields.TypeKind)
	}
	switch {
	case ev.ID != "":
		in.rawID = ev.ID
	case ev.Oversize > 0:
		return in
	case in.err == nil && in.fields.ID != "":
		in.rawID = in.fields.ID
	default:
		in.rawID = digest(ev.Data)
	}
	if in.rawID == ev.ResumeID && in.resumeH != "" {
		in.id = in.resumeH // the usual case: the same id, already in header form
	} else {
		in.id = HeaderID(in.rawID)
	}
	return in
}

// digest names data that comes without an id.
func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// How ids travel in the id headers (Nats-Msg-Id, Tracking-Event-Id, ce-id, Bridge-Resume-After,
// Bridge-Stream-Id); see HeaderID.
const (
	encodedIDPrefix = "base64url:"
	digestIDPrefix  = "sha256-id:"
	// MaxHeaderID is the longest id carried as it is (or encoded): a longer one travels as its digest.
	MaxHeaderID = upstream.MaxResumableID
)

// HeaderID returns the form in which an id travels in a NATS header. Header values are single lines, and
// nats.go trims their leading and trailing white space and turns CR and LF into spaces, so an id with
// control characters or edge white space would arrive mangled: "a\nb" and "a b" would share a
// Nats-Msg-Id, and " " would give an empty one, which turns deduplication off. Such an id travels as
// "base64url:" and its bytes in unpadded base64url (RFC 4648 §5), as does an id that begins with either
// prefix, so that distinct ids keep distinct headers. An id longer than MaxHeaderID bytes travels as
// "sha256-id:" and the hex SHA-256 of its bytes, which bounds every header. Plain ids, the upstream's
// ids in practice, travel unchanged; ParseHeaderID reverses the encoding.
func HeaderID(id string) string {
	if len(id) > MaxHeaderID {
		s := sha256.Sum256([]byte(id))
		return digestIDPrefix + hex.EncodeToString(s[:])
	}
	if plainID(id) {
		return id
	}
	return encodedIDPrefix + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// plainID reports whether id can travel in a header as it is.
func plainID(id string) bool {
	if id == "" || id[0] == ' ' || id[len(id)-1] == ' ' {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return !strings.HasPrefix(id, encodedIDPrefix) && !strings.HasPrefix(id, digestIDPrefix)
}

// ParseHeaderID returns the id a header value made by HeaderID stands for; ok is false for a digest
// (the id itself is not recoverable) and for a value HeaderID cannot have made.
func ParseHeaderID(v string) (id string, ok bool) {
	switch {
	case strings.HasPrefix(v, digestIDPrefix):
		return "", false
	case strings.HasPrefix(v, encodedIDPrefix):
		b, err := base64.RawURLEncoding.DecodeString(v[len(encodedIDPrefix):])
		return string(b), err == nil
	}
	return v, true
}
