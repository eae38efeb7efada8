package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/deadletter"
	"github.com/tracking-bridge/tracking-bridge/internal/streams"
)

// tooLarge turns the prepared entry of an event larger than the events stream stores into a dead letter
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

// refit answers JetStream's or the client's refusal of the entry's message as too large, which the
// limits known when it was prepared did not foresee (a stream's max_msg_size lowered since, a failover
// to a server with a smaller max_payload): it reads the limits again and turns an event into a dead
// letter that describes it, or a dead letter into one that fits. It reports whether the message changed;
// if not, it is sent again as it is, after a pause.
func (p *Publisher) refit(ctx context.Context, e *pending, refusal error) bool {
	if n, err := streams.MaxMsgSize(ctx, p.js, p.cfg.EventsStream); err == nil {
		p.eventsMax = n
	}
	p.readDLQLimit(ctx)
	if e.dead == nil {
		if errors.Is(refusal, nats.ErrMaxPayload) {
			p.tooLarge(e, p.nc.MaxPayload(), false)
		} else {
			p.tooLarge(e, p.eventsMax, true) // refused by JetStream: the stream's limit (0 if unread)
		}
		return true
	}
	max := deadletter.MaxMessage(p.nc.MaxPayload(), p.dlqMax)
	return max > 0 && deadletter.Fit(e.dead, max, e.id)
}

// readDLQLimit reads the max_msg_size of the stream that stores the events' dead letters, keeping the
// last known value when it cannot.
func (p *Publisher) readDLQLimit(ctx context.Context) {
	if p.cfg.DLQStream == "" {
		return
	}
	if n, err := streams.MaxMsgSize(ctx, p.js, p.cfg.DLQStream); err == nil {
		p.dlqMax = n
	} else {
		p.log.Debug("dead-letter stream's max_msg_size unknown", "stream", p.cfg.DLQStream, "err", err)
	}
}

// position is where an event sat in the stream (see Publisher.posID).
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
		HeaderMsgID:            {id},
		HeaderEventID:          {id},
		deadletter.HeaderError: {deadletter.Clip(headerValue(reason), deadletter.MaxErrorHeader)},
	}
	if e.after != "" {
		h[HeaderResumeAfter] = []string{e.after}
	}
	if name != "" {
		h["Sse-Event"] = []string{deadletter.Clip(headerValue(name), maxNameHeader)}
	}
	if e.resumeH != "" && e.resumeH != id {
		h[HeaderStreamID] = []string{e.resumeH}
	}
	m := &nats.Msg{Subject: p.dlq, Header: h, Data: body}
	if deadletter.Fit(m, deadletter.MaxMessage(p.nc.MaxPayload(), p.dlqMax), id) {
		reason = m.Header.Get(deadletter.HeaderError)
	}
	p.log.Warn("event dead-lettered", "event_id", id, "subject", p.dlq, "err", reason)
	p.cfg.Observer.DeadLettered(code)
	*e = pending{seq: e.seq, resume: e.resume, resumeH: e.resumeH, after: e.after, subject: p.dlq, id: id,
		dead: m, noID: e.noID}
}
