package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// The second step of Handle: the NATS message of an event, with its subject and every header, or the
// dead letter that stands for it when it cannot go to P.events.> as it is.

// Message headers of events (docs/subjects.md#event-headers), the bridge's own among them, and of their dead
// letters.
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
	// HeaderSSEEvent, on a dead letter of P.dlq.events, is the SSE event name of the message it stands for.
	HeaderSSEEvent = "Sse-Event"
)

// Fixed values of an event's headers: Content-Type and ce-datacontenttype, and ce-specversion.
const (
	EventContentType       = "application/json"
	CloudEventsSpecVersion = "1.0"
)

// EventHeaders returns the names of every header an event on P.events.> may carry, in the order of the
// message's header block (api/asyncapi.yaml lists them, and its test compares the two).
func EventHeaders() []string { return append([]string(nil), headerNames[:]...) }

// Bounds of headers whose values come from the upstream's data, which keep every header block far below
// layout.MaxHeaderBlock (api/asyncapi.yaml states them as maxLength, and its test compares them).
const (
	MaxSSEEventHeader = 256  // HeaderSSEEvent of a dead letter, cut at this many bytes
	MaxTypeHeader     = 1024 // Tracking-Event-Type, cut at this many bytes
	MaxTimeHeader     = 64   // ce-time, left out when longer: an RFC 3339 time with nanoseconds takes 35 bytes
)

// message is what a window entry sends: an event on P.events.<TYPE>.<UNIT>, whose headers are made from
// these fields at each send (fill), or a dead letter on P.dlq.events, built once.
type message struct {
	subject string // "" for an entry with nothing to send (found already stored)
	token   string // type token, "" for dead letters
	unit    string // unit token, "" for dead letters
	id      string // Nats-Msg-Id, Tracking-Event-Id and ce-id (header form)
	name    string // the SSE event name
	typ     string // Tracking-Event-Type, when hasType
	hasType bool
	time    string // ce-time, "" if none
	after   string // Bridge-Resume-After (header form): what was stored when the entry was made
	ownID   string // Bridge-Stream-Id (header form), "" if none
	data    []byte
	dead    *nats.Msg // a dead letter, built once
	// at is the event's own timestamp, when it is an RFC 3339 time (for bridge_event_freshness_seconds).
	at time.Time
	// tp is the traceparent of the event's span (trace.go), "" with tracing off. There is no
	// tracestate: the span starts a trace of its own, which has none.
	tp string
}

// messages is the state of the message step: the subjects, the message of every first send with its
// header set (reused: nats.go serialises the headers inside PublishMsg, so they are free again when it
// returns), and the size limits messages must fit.
type messages struct {
	events string // "P.events."
	dlq    string // "P.dlq.events"
	hdr    *headerSet
	msg    nats.Msg
	// The max_msg_size of the events and dead-letter streams (0: none), read at start-up and again when
	// JetStream refuses a message as too large.
	eventsMax, dlqMax int64
}

// build makes the entry's message for the event ev, as read into in: on P.events.<TYPE>.<UNIT>, or a dead letter
// on P.dlq.events for data that is not a JSON object or too large. It returns the message to send first,
// which for an event is messages.msg, valid until the next build.
func (p *Publisher) build(e *pending, ev *upstream.Event, in *inbound) *nats.Msg {
	if ev.Oversize > 0 {
		d := struct {
			Error string `json:"error"`
			ID    string `json:"id,omitempty"`
			Size  int    `json:"size"`
			// Where an event without an id sat in the stream, which tells apart such events of one size:
			// the resume id it followed and how many messages came after that id's own.
			After *position `json:"stream_position,omitempty"`
		}{Error: "event larger than BRIDGE_STREAM_MAX_EVENT_BYTES; its data was dropped", Size: ev.Oversize}
		reason := fmt.Sprintf("event of %d bytes exceeds the size bound", ev.Oversize)
		switch {
		case ev.ManyLines:
			reason = fmt.Sprintf("event of more than %d lines exceeds the line bound", upstream.MaxLines)
			d.Error = reason + "; its data was dropped"
		case ev.Slow > 0:
			reason = fmt.Sprintf("event not ended within %s (%d bytes so far) exceeds the time bound", ev.Slow, ev.Oversize)
			d.Error = reason + "; its data was dropped"
		}
		if in.id != "" {
			d.ID = in.id
		} else {
			d.After = &position{ResumeID: e.resumeH, Index: in.index}
		}
		desc, _ := json.Marshal(d)
		p.deadLetter(e, ev.Name, desc, d.ID, ReasonOversize, reason)
		return e.dead
	}
	if in.err != nil {
		reason := "event data is not a JSON object: " + in.err.Error()
		if len(ev.Data) == 0 {
			reason = "event data is empty (a data: line without a value), not a JSON object"
		}
		p.deadLetter(e, ev.Name, ev.Data, in.id, ReasonNotJSON, reason)
		return e.dead
	}
	f := &in.fields
	e.id, e.name, e.data, e.token, e.unit = in.id, ev.Name, ev.Data, in.token, f.Unit
	e.subject = p.msgs.events + e.token + "." + e.unit
	if f.TypeKind == KindString {
		e.typ, e.hasType = logging.Clip(headerValue(f.Type), MaxTypeHeader), true
	}
	if at, ok := eventTime(f.Timestamp); ok {
		// RFC 3339 allows "t" and "z"; not every CloudEvents SDK does (Go's time.Parse refuses them).
		// A valid timestamp is ASCII, so this only changes those two (and copies only when it does).
		e.time, e.at = strings.ToUpper(f.Timestamp), at
	}
	if ev.ResumeID != in.rawID {
		e.ownID = e.resumeH // "" (no id seen on the stream yet) leaves the header out
	}
	p.msgs.hdr.fill(e)
	p.msgs.msg = nats.Msg{Subject: e.subject, Header: p.msgs.hdr.h, Data: e.data}
	// An upper bound of the header block's size: the fixed names and values take under 320 bytes, the
	// fence's under 100 and its subject's base; ce-id and ce-type may be percent-encoded (at most three
	// times as long); with tracing on, the traceparent line. Only an event near the bound is measured
	// exactly.
	hsize := 320 + 100 + len(p.cfg.FenceSubject) + 5*len(e.id) + len(e.typ) + 4*len(e.subject) + 3*len(p.cfg.Source) + len(e.time) +
		len(e.after) + len(e.ownID)
	if e.tp != "" {
		hsize += len(carrier.Traceparent) + len(": \r\n") + len(e.tp)
	}
	payload := p.nc.MaxPayload()
	if max := layout.MaxMessage(payload, p.msgs.eventsMax); max > 0 && int64(len(ev.Data)+hsize) > max &&
		int64(layout.MsgSize(&p.msgs.msg)) > max {
		p.tooLarge(e, max, max == p.msgs.eventsMax && max != payload)
		return e.dead
	}
	return &p.msgs.msg
}

// eventTime returns the time of an event's timestamp member, as ce-time carries it: an RFC 3339 time
// of at most MaxTimeHeader bytes.
func eventTime(ts string) (time.Time, bool) {
	if ts == "" || len(ts) > MaxTimeHeader {
		return time.Time{}, false
	}
	at, _, _, ok := rfc3339.Parse(ts)
	return at, ok
}

// rebuild returns a new message for the entry, for sending it again.
func (p *Publisher) rebuild(e *pending) *nats.Msg {
	if e.dead != nil {
		return e.dead
	}
	h := newHeaderSet(p.cfg.Source, &p.fence)
	h.fill(e)
	return &nats.Msg{Subject: e.subject, Header: h.h, Data: e.data}
}

// headerSet is the header block of an event message (docs/subjects.md#event-headers). The first send of every
// event reuses one (messages.hdr), where only headers that come or go between events touch the map.
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
	hTraceparent
	numHeaders
)

var headerNames = [numHeaders]string{
	hMsgID: HeaderMsgID, hEventID: HeaderEventID, hEventType: HeaderEventType,
	hContentType: "Content-Type", hSpecVersion: "ce-specversion", hDataContentType: "ce-datacontenttype",
	hCEID: "ce-id", hSource: "ce-source",
	hCEType: "ce-type", hTime: "ce-time", hResumeAfter: HeaderResumeAfter, hStreamID: HeaderStreamID,
	hFenceSeq: jetstream.ExpectedLastSubjSeqHeader, hFenceSubject: jetstream.ExpectedLastSubjSeqSubjHeader,
	hTraceparent: carrier.Traceparent,
}

// newHeaderSet returns the header block with the headers every event carries. The CloudEvents attributes
// follow the binary content mode of the NATS protocol binding: ce-datacontenttype as well as
// Content-Type (SDKs read the content type from either), and values percent-encoded (ceValue). With a
// claimed fence, fill adds each event's check, which makes JetStream refuse it once another leader stored
// its markers.
func newHeaderSet(source string, f *fence) *headerSet {
	s := &headerSet{h: make(nats.Header, numHeaders), fence: f}
	s.set(hContentType, EventContentType, true)
	s.set(hSpecVersion, CloudEventsSpecVersion, true)
	s.set(hDataContentType, EventContentType, true)
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
	s.set(hCEType, ceValue(e.typeSubject()), true)
	s.set(hEventType, e.typ, e.hasType)
	s.set(hTime, e.time, e.time != "")
	s.set(hResumeAfter, e.after, e.after != "")
	s.set(hStreamID, e.ownID, e.ownID != "")
	s.set(hTraceparent, e.tp, e.tp != "")
	if s.fence.on() {
		subject, seq := s.fence.check(e.seq)
		s.set(hFenceSeq, seq, true)
		s.set(hFenceSubject, subject, true)
	}
}

// typeSubject is the event's subject without its unit token, P.events.<TYPE>: its CloudEvents type, which
// names the kind of event, not the unit it observed.
func (m *message) typeSubject() string { return m.subject[:len(m.subject)-len(m.unit)-1] }

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

// headerValue removes control characters (which would break the NATS header block) from a header value.
func headerValue(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return strings.Map(func(r rune) rune {
				if r < 0x20 || r == 0x7f {
					return -1
				}
				return r
			}, s)
		}
	}
	return s
}

// tooLarge turns the built entry of an event larger than the events stream stores into a dead letter
// that describes it: larger than the stream's max_msg_size (fromStream) or the server's max_payload, of
// max bytes, headers included (0: not known).
func (p *Publisher) tooLarge(e *pending, max int64, fromStream bool) {
	code, what := ReasonMaxPayload, "the NATS server's max_payload"
	if fromStream {
		code, what = ReasonMaxMsgSize, "the max_msg_size of stream "+p.cfg.EventsStream
	}
	limit := ""
	if max > 0 {
		limit = fmt.Sprintf(" (%d bytes)", max)
	}
	desc, _ := json.Marshal(struct {
		Error string `json:"error"`
		ID    string `json:"id"`
		Type  string `json:"type,omitempty"`
		Size  int    `json:"size"`
	}{"event larger than " + what + "; its data was dropped", e.id, e.token, len(e.data)})
	p.deadLetter(e, e.name, desc, e.id, code, fmt.Sprintf("event of %d bytes exceeds %s%s", len(e.data), what, limit))
}

// position is where an event sat in the stream (see inbound.index).
type position struct {
	ResumeID string `json:"resume_id"`
	Index    int    `json:"index"`
}

// deadLetter turns the entry into the P.dlq.events message for an event that cannot be published as
// such; name is its SSE event name, id its id in header form (HeaderID; "": none, the digest of body
// stands in), code one of the Reason* constants, reason the human-readable Bridge-Error. A dead letter
// larger than the dead-letter stream stores (the server's max_payload, the stream's max_msg_size) carries
// a description of the data instead of the data: otherwise it could never be stored, and the stream
// would stop behind it.
func (p *Publisher) deadLetter(e *pending, name string, body []byte, id, code, reason string) {
	if id == "" {
		id = digest(body)
	}
	h := nats.Header{
		HeaderMsgID:        {id},
		HeaderEventID:      {id},
		layout.HeaderError: {logging.Clip(headerValue(reason), layout.MaxErrorHeader)},
	}
	if e.after != "" {
		h[HeaderResumeAfter] = []string{e.after}
	}
	if name != "" {
		h[HeaderSSEEvent] = []string{logging.Clip(headerValue(name), MaxSSEEventHeader)}
	}
	if e.resumeH != "" && e.resumeH != id {
		h[HeaderStreamID] = []string{e.resumeH}
	}
	if e.tp != "" {
		h[carrier.Traceparent] = []string{e.tp}
	}
	m := &nats.Msg{Subject: p.msgs.dlq, Header: h, Data: body}
	if layout.Fit(m, layout.MaxMessage(p.nc.MaxPayload(), p.msgs.dlqMax), id) {
		reason = m.Header.Get(layout.HeaderError)
	}
	p.log.Warn("event dead-lettered", "event_id", id, "subject", p.msgs.dlq, "err", reason)
	p.cfg.Observer.DeadLettered(code)
	deadLetterSpan(e, code, reason)
	*e = pending{seq: e.seq, resume: e.resume, resumeH: e.resumeH, noID: e.noID, span: e.span,
		message: message{after: e.after, subject: p.msgs.dlq, id: id, dead: m, tp: e.tp}}
}

// readLimits reads the max_msg_size of the events stream and of the stream that stores the events' dead
// letters, keeping the last known value of one it cannot read.
func (p *Publisher) readLimits(ctx context.Context) {
	if n, err := layout.MaxMsgSize(ctx, p.js, p.cfg.EventsStream); err == nil {
		p.msgs.eventsMax = n
	}
	p.readDLQLimit(ctx)
}

// readDLQLimit reads the max_msg_size of the dead-letter stream, keeping the last known value when it
// cannot.
func (p *Publisher) readDLQLimit(ctx context.Context) {
	if p.cfg.DLQStream == "" {
		return
	}
	if n, err := layout.MaxMsgSize(ctx, p.js, p.cfg.DLQStream); err == nil {
		p.msgs.dlqMax = n
	} else {
		p.log.Debug("dead-letter stream's max_msg_size unknown", "stream", p.cfg.DLQStream, "err", err)
	}
}
