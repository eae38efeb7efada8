package publish

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/event"
)

// Message headers set on every event (contract §3), plus the bridge's own resume header.
const (
	HeaderMsgID     = "Nats-Msg-Id"
	HeaderEventID   = "Tracking-Event-Id"
	HeaderEventType = "Tracking-Event-Type"
	// HeaderResumeAfter names the stream id after which resuming loses nothing: when the message was sent,
	// every event up to that id was acknowledged by JetStream. The resume cursor is built from it.
	HeaderResumeAfter = "Bridge-Resume-After"
	// HeaderStreamID carries the message's own SSE resume id when it differs from its event id (an SSE
	// message without an id: line).
	HeaderStreamID = "Bridge-Stream-Id"
)

// headerSet is the header block of an event message (contract §3). The first send of every event reuses
// one: nats.go serialises the headers inside PublishMsg, so the map is free again when it returns, and
// only headers that come or go between events touch the map.
type headerSet struct {
	fence *fence // the publisher's; its checks are set per event once claimed
	h     nats.Header
	vals  [numHeaders][1]string
	on    [numHeaders]bool
}

// The headers of an event message, by index into headerSet.
const (
	hMsgID = iota
	hEventID
	hEventType
	hContentType
	hSpecVersion
	hDataContentType
	hCEID
	hSource
	hCEType
	hTime
	hResumeAfter
	hStreamID
	hFenceSeq
	hFenceSubject
	numHeaders
)

var headerNames = [numHeaders]string{
	hMsgID: HeaderMsgID, hEventID: HeaderEventID, hEventType: HeaderEventType,
	hContentType: "Content-Type", hSpecVersion: "ce-specversion", hDataContentType: "ce-datacontenttype",
	hCEID: "ce-id", hSource: "ce-source",
	hCEType: "ce-type", hTime: "ce-time", hResumeAfter: HeaderResumeAfter, hStreamID: HeaderStreamID,
	hFenceSeq: jetstream.ExpectedLastSubjSeqHeader, hFenceSubject: jetstream.ExpectedLastSubjSeqSubjHeader,
}

// newHeaderSet returns the header block with the headers every event carries. The CloudEvents attributes
// follow the binary content mode of the NATS protocol binding: ce-datacontenttype as well as
// Content-Type (SDKs read the content type from either), and values percent-encoded (ceValue). With a
// claimed fence, fill adds each event's check, which makes JetStream refuse it once another leader stored
// its markers.
func newHeaderSet(source string, f *fence) *headerSet {
	s := &headerSet{h: make(nats.Header, numHeaders), fence: f}
	s.set(hContentType, "application/json", true)
	s.set(hSpecVersion, "1.0", true)
	s.set(hDataContentType, "application/json", true)
	s.set(hSource, ceValue(source), true)
	return s
}

// set sets header i to v, or removes it when !on.
func (s *headerSet) set(i int, v string, on bool) {
	if on {
		s.vals[i][0] = v
		if !s.on[i] {
			s.h[headerNames[i]] = s.vals[i][:]
		}
	} else if s.on[i] {
		delete(s.h, headerNames[i])
	}
	s.on[i] = on
}

// fill sets the headers of the entry's event.
func (s *headerSet) fill(e *pending) {
	s.set(hMsgID, e.id, true)
	s.set(hEventID, e.id, true)
	s.set(hCEID, ceValue(e.id), true)
	s.set(hCEType, ceValue(e.subject), true)
	s.set(hEventType, e.typ, e.hasType)
	s.set(hTime, e.time, e.time != "")
	s.set(hResumeAfter, e.after, e.after != "")
	s.set(hStreamID, e.ownID, e.ownID != "")
	if s.fence.on() {
		subject, seq := s.fence.check(e.seq)
		s.set(hFenceSeq, seq, true)
		s.set(hFenceSubject, subject, true)
	}
}

// How ids travel in the id headers (Nats-Msg-Id, Tracking-Event-Id, ce-id, Bridge-Resume-After,
// Bridge-Stream-Id); see HeaderID.
const (
	encodedIDPrefix = "base64url:"
	digestIDPrefix  = "sha256-id:"
	// MaxHeaderID is the longest id carried as it is (or encoded): a longer one travels as its digest.
	MaxHeaderID = event.MaxResumableID
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

// ceValue returns a CloudEvents attribute value as the NATS protocol binding carries it in a header: space,
// '"', '%' and every byte outside printable ASCII percent-encoded (the UTF-8 bytes of a character each
// as %XX). A value that needs no encoding, every id and subject in practice, is returned as it is.
func ceValue(v string) string {
	i := 0
	for i < len(v) && ceSafe(v[i]) {
		i++
	}
	if i == len(v) {
		return v
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(v)+16)
	b = append(b, v[:i]...)
	for ; i < len(v); i++ {
		if c := v[i]; ceSafe(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return string(b)
}

// ceSafe reports whether c travels in a CloudEvents header value as it is.
func ceSafe(c byte) bool { return c > ' ' && c < 0x7f && c != '"' && c != '%' }
