package publish

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/deadletter"
	"github.com/tracking-bridge/tracking-bridge/internal/event"
	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// eventScan is ScanEvent's result for an event's data, computed at most once: after a restart the skip
// check (eventKey) may need the event's JSON id before prepare needs its other fields.
type eventScan struct {
	data []byte
	f    Fields
	err  error
	done bool
}

// fields returns ScanEvent(data), scanning on the first call only.
func (s *eventScan) fields() (Fields, error) {
	if !s.done {
		s.f, s.err = ScanEvent(s.data)
		s.done = true
	}
	return s.f, s.err
}

// prepare fills the entry for an event: a message on P.events.<TYPE>, or a dead letter on P.dlq.events.
// sc is the event's scan (eventScan over ev.Data).
func (p *Publisher) prepare(e *pending, ev *event.Event, sc *eventScan) {
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
		if ev.ManyLines {
			reason = fmt.Sprintf("event of more than %d lines exceeds the line bound", event.MaxLines)
			d.Error = reason + "; its data was dropped"
		}
		if ev.ID != "" {
			d.ID = HeaderID(ev.ID)
		} else {
			d.After = &position{ResumeID: e.resumeH, Index: p.posN}
		}
		desc, _ := json.Marshal(d)
		p.deadLetter(e, ev.Name, desc, d.ID, ReasonOversize, reason)
		return
	}
	f, err := sc.fields()
	if err != nil {
		var hid string
		if ev.ID != "" {
			hid = HeaderID(ev.ID)
		}
		reason := "event data is not a JSON object: " + err.Error()
		if len(ev.Data) == 0 {
			reason = "event data is empty (a data: line without a value), not a JSON object"
		}
		p.deadLetter(e, ev.Name, ev.Data, hid, ReasonNotJSON, reason)
		return
	}
	id := ev.ID
	if id == "" {
		id = f.ID
	}
	if id == "" {
		id = digest(ev.Data)
	}
	e.id, e.name, e.data = HeaderID(id), ev.Name, ev.Data
	e.token = TypeToken(f.Type, f.TypeKind)
	e.subject = p.events + e.token
	if f.TypeKind == KindString {
		e.typ, e.hasType = deadletter.Clip(headerValue(f.Type), maxTypeHeader), true
	}
	if f.Timestamp != "" && len(f.Timestamp) <= maxTimeHeader && rfc3339.Valid(f.Timestamp) {
		// RFC 3339 allows "t" and "z"; not every CloudEvents SDK does (Go's time.Parse refuses them).
		// A valid timestamp is ASCII, so this only changes those two (and copies only when it does).
		e.time = strings.ToUpper(f.Timestamp)
	}
	if ev.ResumeID != id {
		e.ownID = e.resumeH // "" (no id seen on the stream yet) leaves the header out
	}
	// An upper bound of the header block's size: the fixed names and values take under 320 bytes, the
	// fence's under 100 and its subject's base; ce-id
	// and ce-type may be percent-encoded (at most three times as long).
	hsize := 320 + 100 + len(p.cfg.FenceSubject) + 5*len(e.id) + len(e.typ) + 4*len(e.subject) + 3*len(p.cfg.Source) + len(e.time) +
		len(e.after) + len(e.ownID)
	// Only an event near the bound is measured exactly.
	if max := deadletter.MaxMessage(p.nc.MaxPayload(), p.eventsMax); max > 0 && int64(len(ev.Data)+hsize) > max &&
		int64(deadletter.MsgSize(p.message(e))) > max {
		p.tooLarge(e, max, max == p.eventsMax && max != p.nc.MaxPayload())
	}
}

// Bounds of headers whose values come from the upstream's data, which keep every header block far below
// deadletter.MaxHeaderBlock.
const (
	maxNameHeader = 256  // Sse-Event of a dead letter
	maxTypeHeader = 1024 // Tracking-Event-Type
	maxTimeHeader = 64   // ce-time: an RFC 3339 time with nanoseconds takes 35 bytes
)

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// message builds a new message for the entry, for sending it again.
func (p *Publisher) message(e *pending) *nats.Msg {
	if e.dead != nil {
		return e.dead
	}
	h := newHeaderSet(p.cfg.Source, &p.fence)
	h.fill(e)
	return &nats.Msg{Subject: e.subject, Header: h.h, Data: e.data}
}
