package publish

import "github.com/nats-io/nats.go"

// Message headers set on every event (contract §3), plus the bridge's own resume header.
const (
	HeaderMsgID     = "Nats-Msg-Id"
	HeaderEventID   = "Tracking-Event-Id"
	HeaderEventType = "Tracking-Event-Type"
	HeaderError     = "Bridge-Error"
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
	h    nats.Header
	vals [numHeaders][1]string
	on   [numHeaders]bool
}

// The headers of an event message, by index into headerSet.
const (
	hMsgID = iota
	hEventID
	hEventType
	hContentType
	hSpecVersion
	hCEID
	hSource
	hCEType
	hTime
	hResumeAfter
	hStreamID
	numHeaders
)

var headerNames = [numHeaders]string{
	hMsgID: HeaderMsgID, hEventID: HeaderEventID, hEventType: HeaderEventType,
	hContentType: "Content-Type", hSpecVersion: "ce-specversion", hCEID: "ce-id", hSource: "ce-source",
	hCEType: "ce-type", hTime: "ce-time", hResumeAfter: HeaderResumeAfter, hStreamID: HeaderStreamID,
}

func newHeaderSet(source string) *headerSet {
	s := &headerSet{h: make(nats.Header, numHeaders)}
	s.set(hContentType, "application/json", true)
	s.set(hSpecVersion, "1.0", true)
	s.set(hSource, source, true)
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
	s.set(hCEID, e.id, true)
	s.set(hCEType, e.subject, true)
	s.set(hEventType, e.typ, e.hasType)
	s.set(hTime, e.time, e.time != "")
	s.set(hResumeAfter, e.after, e.after != "")
	s.set(hStreamID, e.ownID, e.ownID != "")
}
