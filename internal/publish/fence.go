package publish

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrFenced is the error of Handle and Resume once JetStream refused an event because another leader
// moved the fence (contract §6): this publisher must stop, and its process must stop leading. The
// Publisher is of no further use.
var ErrFenced = errors.New("fenced out: another bridge took over the events stream")

// Headers of a marker on the fence subject. A marker stored by `bridge cursor restart` carries a restart
// directive: the next leader resumes the upstream stream after HeaderRestartAfter, or from its beginning,
// instead of after the last stored event.
const (
	HeaderLeader       = "Bridge-Leader"        // the marker's writer: a holder's name, or "operator"
	HeaderRestart      = "Bridge-Restart"       // "after" or "beginning"
	HeaderRestartAfter = "Bridge-Restart-After" // the id, in header form (HeaderID), with "after"
)

// Values of HeaderRestart.
const (
	RestartAfter     = "after"
	RestartBeginning = "beginning"
)

// fence is the check every event of a leader carries: the fence subject's last message is still the
// marker this leader stored, at stream sequence seq. Zero: not fenced.
type fence struct {
	subject string
	seq     uint64
}

// Claim stores this leader's marker on the fence subject (Config.FenceSubject) and makes every later event
// conditional on it: once another leader stores its own marker, JetStream refuses this publisher's events,
// and Handle returns ErrFenced. Call it once, before the first Resume, after acquiring the lease: a former
// leader's event stored before the marker is then counted by the cursor Resume reads, and one arriving
// after it is refused. leader names the holder in the marker (HeaderLeader) and body is stored as its data.
func (p *Publisher) Claim(ctx context.Context, leader string, body []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.FenceSubject == "" {
		return errors.New("publish: Claim without Config.FenceSubject")
	}
	s, err := p.js.Stream(ctx, p.cfg.EventsStream)
	if err != nil {
		return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
	}
	m := &nats.Msg{Subject: p.cfg.FenceSubject, Data: body, Header: nats.Header{HeaderLeader: {headerValue(leader)}}}
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithExpectStream(p.cfg.EventsStream))
	if err != nil {
		return fmt.Errorf("storing the fence marker on %s: %w", p.cfg.FenceSubject, err)
	}
	p.fence = fence{subject: p.cfg.FenceSubject, seq: ack.Sequence}
	p.serial = s.CachedInfo().Config.Replicas > 1
	p.hdr = newHeaderSet(p.cfg.Source, p.fence)
	p.log.Info("fence claimed", "subject", p.fence.subject, "seq", ack.Sequence, "serial", p.serial)
	return nil
}

// RequestRestart stores a marker with a restart directive on the fence subject of the events stream: the
// leader in office is fenced out at its next event (it stops, and the lease passes on), and the next
// leader resumes the upstream stream after the id (beginning false) or from its beginning. It never
// touches the stream otherwise.
func RequestRestart(ctx context.Context, js jetstream.JetStream, stream, fenceSubject, after string, beginning bool) (uint64, error) {
	h := nats.Header{HeaderLeader: {"operator"}}
	if beginning {
		h.Set(HeaderRestart, RestartBeginning)
	} else {
		if after == "" {
			return 0, errors.New("an event id to restart after is required")
		}
		h.Set(HeaderRestart, RestartAfter)
		h.Set(HeaderRestartAfter, HeaderID(after))
	}
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: fenceSubject, Header: h}, jetstream.WithExpectStream(stream))
	if err != nil {
		return 0, fmt.Errorf("storing the restart marker on %s: %w", fenceSubject, err)
	}
	return ack.Sequence, nil
}

// restartDirective returns the resume point a fence marker's restart directive names, in header form
// ("" for the beginning); ok is false for a marker without a usable one.
func restartDirective(h nats.Header) (after string, ok bool) {
	switch h.Get(HeaderRestart) {
	case RestartBeginning:
		return "", true
	case RestartAfter:
		v := h.Get(HeaderRestartAfter)
		return v, v != ""
	}
	return "", false
}

// fencedOut reports whether the entry's publish was refused by the fence: its check on the fence subject
// failed because another marker was stored since this leader's. (A second check in flight on a
// replicated stream is refused with another code, 10164, which is sent again like any refusal.)
func (p *Publisher) fencedOut(e *pending) bool {
	var api *jetstream.APIError
	return p.fence.seq > 0 && e.dead == nil && errors.As(e.err, &api) &&
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// errFenced logs the fencing and returns ErrFenced with the refusal.
func (p *Publisher) errFenced(e *pending) error {
	p.log.Warn("events refused by the fence: another bridge leads now; stopping", "subject", p.fence.subject,
		"fence_seq", p.fence.seq, "event_id", e.id, "err", e.err)
	return fmt.Errorf("%w: %w", ErrFenced, e.err)
}
